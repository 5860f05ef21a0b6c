// Package pricing turns the prices section of a policy file into the price
// table that prices requests, for the binaries that read policy files
// (package config does not import weights, which would link the
// tokenizers into every reader of a file).
package pricing

import (
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/weights"
)

// Table builds the price table of a policy file's prices section: the
// built-in table unless the section leaves it out, the section's own
// models over it, its aliases and its fallback price.
func Table(p config.Prices) (*weights.Prices, error) {
	cfg := weights.PricesConfig{OmitBuiltin: !p.Builtin, Models: make(map[string]weights.Price, len(p.Models)), Aliases: p.Aliases}
	for name, pr := range p.Models {
		cfg.Models[name] = weights.Price(pr)
	}
	if p.Fallback != nil {
		fb := weights.Price(*p.Fallback)
		cfg.Fallback = &fb
	}
	return weights.NewPriceTable(cfg)
}
