package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// parseAmount parses a count as people write it: 600, 100_000, 100k, 2M
// (k, M and G are powers of 1000).
func parseAmount(s string) (int64, error) {
	t := strings.ReplaceAll(strings.TrimSpace(s), "_", "")
	mult := int64(1)
	switch {
	case strings.HasSuffix(t, "k"), strings.HasSuffix(t, "K"):
		mult, t = 1_000, t[:len(t)-1]
	case strings.HasSuffix(t, "M"):
		mult, t = 1_000_000, t[:len(t)-1]
	case strings.HasSuffix(t, "G"):
		mult, t = 1_000_000_000, t[:len(t)-1]
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a whole number (write 600, 100_000 or 100k)", s)
	}
	if n > math.MaxInt64/mult || n < math.MinInt64/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}

// parseDuration parses a Go duration ("90s", "1m30s", "250ms") or a whole
// number of days ("7d"). A bare number is refused: its unit would be a guess.
func parseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if d, ok := strings.CutSuffix(t, "d"); ok {
		n, err := strconv.ParseInt(d, 10, 64)
		if err == nil && n >= -100_000 && n <= 100_000 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	if _, err := strconv.ParseFloat(t, 64); err == nil && t != "0" {
		return 0, fmt.Errorf("%q has no unit (write 90s, 1m, 1h or 1d)", s)
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (write 90s, 1m, 1h or 1d)", s)
	}
	return d, nil
}

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1_000}, {"MB", 1_000_000}, {"GB", 1_000_000_000},
	{"kB", 1_000}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1},
}

// parseSize parses a byte size: 1048576, 512KiB, 1MiB, 10MB, 4M (a bare
// K, M or G is binary, as in nginx).
func parseSize(s string) (int64, error) {
	t := strings.ReplaceAll(strings.TrimSpace(s), "_", "")
	mult := int64(1)
	for _, u := range sizeUnits {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			mult, t = u.mult, strings.TrimSpace(num)
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size (write 1048576, 512KiB or 1MiB)", s)
	}
	if n > math.MaxInt64/mult {
		return 0, errors.New("size too large")
	}
	return n * mult, nil
}

// validName reports whether s can name a policy or plan: it appears
// unescaped in response headers and metric labels.
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '-' || c == '_' || c == '.') && i > 0:
		default:
			return false
		}
	}
	return true
}
