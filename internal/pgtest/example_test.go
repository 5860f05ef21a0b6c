package pgtest_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/sluicehq/sluice/internal/pgtest"
)

// Launch starts a throwaway cluster for code without a testing.TB.
func ExampleLaunch() {
	srv, err := pgtest.Launch()
	if err != nil {
		panic(err)
	}
	defer srv.Stop()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		panic(err)
	}
	defer conn.Close(ctx)
	var n int
	_ = conn.QueryRow(ctx, "SELECT 6 * 7").Scan(&n)
	fmt.Println(n)
	// Output: 42
}
