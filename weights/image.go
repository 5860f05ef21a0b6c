package weights

import (
	"encoding/base64"
	"fmt"
	"image"
	_ "image/gif" // decoders for the dimensions of data: URL images
	_ "image/jpeg"
	_ "image/png"
	"io"
	"strings"
)

// ImageCost prices image inputs. The zero value uses OpenAI's published
// formula for the gpt-4o and gpt-4.1 families: a "low" detail image costs
// BaseTokens (85); any other is scaled to fit 2048×2048, then so that its
// shorter side is at most 768 pixels, and costs BaseTokens plus TileTokens
// (170) per 512-pixel tile. The dimensions of a base64 data: URL image (PNG,
// JPEG, GIF) are read from its header, for the first 64 such images of a
// request; an image behind an http(s) URL, and any further data: URL image,
// is assumed to be UnknownWidth×UnknownHeight (1024×1024: 765 tokens), so
// that a request of thousands of tiny images costs bounded work. Models that
// price images differently (gpt-4o-mini multiplies these figures) are
// configured with other BaseTokens and TileTokens, or with FlatTokens.
type ImageCost struct {
	// FlatTokens, when positive, is the price of every image regardless of
	// size and detail.
	FlatTokens int64 `json:"flat_tokens,omitempty" yaml:"flat_tokens,omitempty"`
	// BaseTokens is the fixed part of an image's price. Zero means 85.
	BaseTokens int64 `json:"base_tokens,omitempty" yaml:"base_tokens,omitempty"`
	// TileTokens is the price of each 512-pixel tile. Zero means 170.
	TileTokens int64 `json:"tile_tokens,omitempty" yaml:"tile_tokens,omitempty"`
	// UnknownWidth and UnknownHeight are the assumed size of an image whose
	// size cannot be read. Zero means 1024.
	UnknownWidth  int `json:"unknown_width,omitempty" yaml:"unknown_width,omitempty"`
	UnknownHeight int `json:"unknown_height,omitempty" yaml:"unknown_height,omitempty"`
}

// maxImageHeaders is how many data: URL images of one request have their
// header read.
const maxImageHeaders = 64

func (c ImageCost) validate(path string) []error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int64
	}{{"flat_tokens", c.FlatTokens}, {"base_tokens", c.BaseTokens}, {"tile_tokens", c.TileTokens}, {"unknown_width", int64(c.UnknownWidth)}, {"unknown_height", int64(c.UnknownHeight)}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s.%s: must be >= 0", path, f.name))
		}
	}
	if c.UnknownWidth > 1<<16 || c.UnknownHeight > 1<<16 {
		errs = append(errs, fmt.Errorf("%s: unknown_width and unknown_height must be <= 65536", path))
	}
	return errs
}

func (c ImageCost) withDefaults() ImageCost {
	if c.BaseTokens == 0 {
		c.BaseTokens = 85
	}
	if c.TileTokens == 0 {
		c.TileTokens = 170
	}
	if c.UnknownWidth == 0 {
		c.UnknownWidth = 1024
	}
	if c.UnknownHeight == 0 {
		c.UnknownHeight = 1024
	}
	return c
}

// tokens prices one image given its URL and detail ("low", "high", "auto"
// or empty).
func (c ImageCost) tokens(url, detail string) int64 {
	if c.FlatTokens > 0 {
		return c.FlatTokens
	}
	if detail == "low" {
		return c.BaseTokens
	}
	w, h, ok := dataURLSize(url)
	if !ok {
		w, h = c.UnknownWidth, c.UnknownHeight
	}
	return satAdd(c.BaseTokens, satMul(c.TileTokens, imageTiles(w, h)))
}

// ImageTokens returns the price, in tokens, of a w×h image at the given
// detail under OpenAI's formula (see [ImageCost]) with the default figures.
func ImageTokens(w, h int, detail string) int64 {
	c := ImageCost{}.withDefaults()
	if detail == "low" {
		return c.BaseTokens
	}
	return c.BaseTokens + c.TileTokens*imageTiles(w, h)
}

// imageTiles counts the 512-pixel tiles of a w×h image after OpenAI's
// scaling: fit within 2048×2048, then shorter side at most 768.
func imageTiles(w, h int) int64 {
	if w <= 0 || h <= 0 {
		return 0
	}
	fw, fh := fit(float64(w), float64(h), 2048)
	if s := 768 / min(fw, fh); s < 1 {
		fw, fh = fw*s, fh*s
	}
	tw := (int64(fw) + 511) / 512
	th := (int64(fh) + 511) / 512
	return max(tw, 1) * max(th, 1)
}

// fit scales a w×h image down, keeping its aspect ratio, so that its
// longer side is at most bound.
func fit(w, h, bound float64) (float64, float64) {
	if s := bound / max(w, h); s < 1 {
		return w * s, h * s
	}
	return w, h
}

// dataURLSize reads the dimensions of a base64 data: URL image from its
// header, decoding at most 64 KiB.
func dataURLSize(url string) (w, h int, ok bool) {
	rest, found := strings.CutPrefix(url, "data:")
	if !found {
		return 0, 0, false
	}
	meta, data, found := strings.Cut(rest, ",")
	if !found || !strings.HasSuffix(meta, ";base64") {
		return 0, 0, false
	}
	return base64ImageSize(data)
}

// base64ImageSize reads the dimensions of a base64-encoded PNG, JPEG or
// GIF image from its header, decoding at most 64 KiB.
func base64ImageSize(data string) (w, h int, ok bool) {
	r := io.LimitReader(base64.NewDecoder(base64.StdEncoding, strings.NewReader(data)), 64<<10)
	cfg, _, err := image.DecodeConfig(r)
	if err != nil || cfg.Width <= 0 || cfg.Height <= 0 {
		return 0, 0, false
	}
	return cfg.Width, cfg.Height, true
}
