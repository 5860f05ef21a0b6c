package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/config"
)

// TestLoadRefusesHugeFile gives Load a file larger than MaxFileSize (sparse:
// it takes no disk) and a file that never ends (/dev/zero): each is
// refused with an error naming the bound, without being read whole.
func TestLoadRefusesHugeFile(t *testing.T) {
	huge := filepath.Join(t.TempDir(), "huge.yaml")
	fh, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Truncate(config.MaxFileSize + 1); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	for _, path := range []string{huge, "/dev/zero"} {
		if _, err := os.Stat(path); err != nil {
			t.Logf("skipping %s: %v", path, err)
			continue
		}
		_, err := config.Load(path)
		var es config.Errors
		if !errors.As(err, &es) || len(es) != 1 || !strings.Contains(err.Error(), "MaxFileSize") || es[0].File != path {
			t.Errorf("Load(%s) = %v; want one error naming the bound", path, err)
		}
	}
	if _, err := config.Parse("big.yaml", make([]byte, config.MaxFileSize+1)); err == nil || !strings.Contains(err.Error(), "MaxFileSize") {
		t.Errorf("Parse(MaxFileSize+1 bytes) = %v; want an error naming the bound", err)
	}
}
