package config

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// The deployments section names the Azure OpenAI deployments a program
// serves, each with the model it runs: a request for a deployment is
// priced, limited (match.models, a policy keyed by model) and measured
// as its model, and a deployment the section does not name is refused
// (llmproxy: 404 DeploymentNotFound), never forwarded.
//
//	deployments:
//	  prod-chat: {model: gpt-4o-mini}
//	  embed: {model: text-embedding-3-small}

// MaxDeployments bounds the deployments section.
const MaxDeployments = 1024

// MaxDeploymentName bounds a deployment name: Azure's own names are at
// most 64 characters.
const MaxDeploymentName = 64

// Deployment is one entry of the deployments section.
type Deployment struct {
	// Name is the deployment's name as the file writes it, which is the
	// name the program puts in the upstream path.
	Name string
	// Model is the model the deployment runs, as the prices and the
	// policies' match.models name it.
	Model string
}

// Deployments is the deployments section, by lower-cased name (Azure
// deployment names are case-insensitive). The zero Deployments names
// none.
type Deployments map[string]Deployment

// Lookup returns the deployment named name, whatever its case.
func (ds Deployments) Lookup(name string) (Deployment, bool) {
	d, ok := ds[strings.ToLower(name)]
	return d, ok
}

// ValidDeploymentName reports whether name may name a deployment: a
// ValidPathSegment of at most MaxDeploymentName bytes.
func ValidDeploymentName(name string) bool { return ValidPathSegment(name, MaxDeploymentName) }

// ValidPathSegment reports whether name may go into a URL path as one
// segment, as written: 1 to max ASCII letters, digits and - _ ., neither
// "." nor "..": nothing that could change the meaning of the path.
func ValidPathSegment(name string, max int) bool {
	if name == "" || len(name) > max || name == "." || name == ".." {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch b := name[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '-', b == '_', b == '.':
		default:
			return false
		}
	}
	return true
}

func (d *decoder) decodeDeployments(n *yaml.Node, path string) {
	ds := Deployments{}
	d.f.Deployments = ds
	if r := d.resolve(n); r.Kind == yaml.MappingNode && len(r.Content)/2 > MaxDeployments {
		d.errorf(r, path, "%d deployments: at most %d (config.MaxDeployments)", len(r.Content)/2, MaxDeployments)
		return
	}
	d.pairs(n, path, func(name string, k, v *yaml.Node, p string) {
		var dep Deployment
		if !d.mapping(v, p, field{"model", d.str(&dep.Model)}) {
			return
		}
		key := strings.ToLower(name)
		switch first, dup := ds[key]; {
		case !ValidDeploymentName(name):
			d.errorf(k, p, "not a deployment name (1 to %d letters, digits, '-', '_', '.')", MaxDeploymentName)
		case dup:
			d.errorf(k, p, "duplicates %s (deployment names are case-insensitive)", join(path, first.Name))
		case dep.Model == "":
			d.errorf(d.resolve(v), p+".model", "missing: the model the deployment runs (gpt-4o-mini)")
		case d.modelName(dep.Model, d.resolve(v), p+".model"):
			dep.Name = name
			ds[key] = dep
		}
	})
}
