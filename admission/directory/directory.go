// Package directory holds the tenant directory in memory: the tenants with
// their plan and own overrides, the plans with their per-policy limits,
// and the API keys by hash (key id, user, tenant). The request path reads
// it from memory only, in the snapshot its Target decides requests with
// (httpadmit.Snapshot, the gateway's): a whole directory makes a new
// snapshot with the policy file (Target.Apply), a change of one tenant or
// one key a snapshot sharing all the rest with the one in force
// (Target.SetTenant, Target.SetKey: one shard of the tenants' limits or
// of the keys copied, admission.PolicySet.WithTenant and
// httpadmit.KeySet), so that a request never sees a tenant's keys and
// limits from two versions of the directory.
//
// The policy file is one home of a directory (its default_plan, plans and
// tenants sections, today's behaviour and the default: FromFile); a
// database is another (package pgdir, with directory.source postgres in
// the file). The policies themselves always come from the policy file.
//
// A Directory sits between the policy file watcher and the program's
// subscriber (the gateway, the middleware): Apply takes a policy file,
// Install a whole directory, SetTenant and SetKey one entry. Entries that
// do not validate against the file's policies are refused one by one,
// with the messages admitctl check gives, and the rest is installed.
package directory

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
)

// Data is a whole directory as plain data.
type Data struct {
	// Plans holds the default plan, the plans' overrides by policy and
	// the tenants' plans and own overrides.
	Plans limits.Plans
	// Keys maps the hashes of the live (not revoked) API keys to their
	// callers.
	Keys map[config.KeyHash]config.Key
}

// FromFile returns the directory a policy file holds.
func FromFile(f *config.File) *Data {
	return &Data{Plans: f.Config.Plans, Keys: f.Identity.Keys}
}

// Clone returns a copy of d sharing nothing with it but the override maps,
// which are never changed in place.
func (d *Data) Clone() *Data {
	return &Data{
		Plans: limits.Plans{Default: d.Plans.Default, Plans: maps.Clone(d.Plans.Plans), Tenants: maps.Clone(d.Plans.Tenants)},
		Keys:  maps.Clone(d.Keys),
	}
}

// A Target is where a Directory installs: a program's snapshot of its
// configuration (a httpadmit.Middleware, the gateway). Each method makes
// one new snapshot and installs it whole, or fails and changes nothing.
type Target interface {
	// Apply installs a policy file with the directory's plans and keys.
	Apply(f *config.File) error
	// SetTenant changes one tenant's plan and overrides (tp nil removes
	// it), keeping the others and every partition.
	SetTenant(tenant string, tp *limits.TenantPlan) error
	// SetKey adds or replaces one API key (k nil revokes it).
	SetKey(h config.KeyHash, k *config.Key) error
}

// Config is what a Directory installs into.
type Config struct {
	// Next is where policy files are installed, with their plans and
	// keys taken from the directory, and where changes of one entry go.
	Next Target
	// Source names the directory in the problems reported ("postgres").
	Source string
	// Logger gets the entries a reloaded policy file refuses; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Directory is the in-memory directory of a running program.
type Directory struct {
	next   Target
	source string
	log    *slog.Logger

	mu   sync.Mutex // serialises changes
	file *config.File
	data *Data // what is installed: valid entries only
}

// New returns an empty Directory; Apply gives it its policy file.
func New(cfg Config) (*Directory, error) {
	if cfg.Next == nil {
		return nil, errors.New("directory: Next is required")
	}
	d := &Directory{next: cfg.Next, source: cfg.Source, log: cfg.Logger, data: &Data{}}
	if d.log == nil {
		d.log = slog.Default()
	}
	return d, nil
}

// Data returns a copy of the directory installed.
func (d *Directory) Data() *Data {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.data.Clone()
}

// Apply installs a policy file, as a config.Subscriber: its policies with
// the directory's plans. Entries the new policies refuse are left out and
// logged, each with its path, while the file is installed. Where the
// directory lives changes with a restart: a reloaded file whose directory
// section changed is installed with the running section (and without
// the file's default_plan, plans and tenants, which the change would
// bring), and the change is logged as refused and returned as a
// *config.PartialError (section "directory": the watcher reports the file
// applied without it) at each such reload until the section is restored
// or the program restarts.
func (d *Directory) Apply(f *config.File) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var partial error
	if d.file != nil && f.Directory != d.file.Directory {
		d.log.Error("policy file applied without its directory section: the section changed, and a restart applies it",
			"file", f.Source, "running", describe(d.file.Directory), "refused", describe(f.Directory))
		// What was refused first: a status page bounds the message.
		partial = &config.PartialError{Section: "directory", Err: fmt.Errorf("%s refused, a restart applies it; running %s",
			describe(f.Directory), describe(d.file.Directory))}
		kept := *f
		kept.Directory = d.file.Directory
		f = &kept
	}
	err := d.installLocked(f, d.data)
	if errors.Is(err, ErrRefused) && d.file == f {
		d.log.Warn("directory entries refused by the policy file", "source", d.source, "problems", err.Error())
		err = nil
	}
	if err != nil {
		return err
	}
	return partial
}

// describe says where a directory section puts the directory.
func describe(s config.Directory) string {
	if s.Source != config.DirectoryPostgres {
		return "source " + cmp.Or(s.Source, config.DirectoryFile)
	}
	return fmt.Sprintf("source postgres, dsn_env %s, refresh %v, snapshot %q", s.DSNEnv, s.Refresh, s.Snapshot)
}

// ErrRefused is matched by the errors of Install and Apply that report
// entries refused while the rest was installed.
var ErrRefused = errors.New("directory entries refused")

// Install installs a whole directory (a load, a refresh) with the last
// policy file applied. The valid entries are installed; the refused ones
// are reported, each by its path (plans.<plan>.<policy>,
// tenants.<tenant>..., default_plan), in an error wrapping ErrRefused and
// a config.Errors. The Directory keeps data: the caller must not change it
// afterwards.
func (d *Directory) Install(data *Data) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.file == nil {
		return errors.New("directory: Install before Apply")
	}
	return d.installLocked(d.file, data)
}

func (d *Directory) installLocked(f *config.File, data *Data) error {
	valid, refused := d.check(f, data)
	if valid == nil {
		return refused
	}
	merged := *f
	merged.Config.Plans = valid.Plans
	// Next may keep the file it installs (and read its plans) while
	// SetTenant changes the directory's own map.
	merged.Config.Plans.Tenants = maps.Clone(valid.Plans.Tenants)
	merged.Identity.Keys = valid.Keys
	if err := d.next.Apply(&merged); err != nil {
		return err
	}
	d.file, d.data = f, valid
	return refused
}

// check returns the valid part of data, and the problems of the rest; a
// nil Data when the problems cannot be told apart by entry.
func (d *Directory) check(f *config.File, data *Data) (*Data, error) {
	all := f.CheckPlans(d.source, &data.Plans)
	valid := data
	if len(all) > 0 {
		valid = data.Clone()
	}
	for _, e := range all {
		if !refuse(&valid.Plans, &data.Plans, e.Path) {
			return nil, errors.Join(ErrRefused, all)
		}
	}
	if len(all) > 0 {
		if es := f.CheckPlans(d.source, &valid.Plans); len(es) > 0 {
			return nil, errors.Join(ErrRefused, es)
		}
	}
	for h, k := range valid.Keys {
		if k.Tenant == f.Identity.AnonymousTenant {
			if valid == data {
				valid = data.Clone()
			}
			all = append(all, &config.Error{File: d.source, Path: "keys." + h.ID(), Msg: fmt.Sprintf("%q is the anonymous tenant (identity.anonymous_tenant): callers without a key would share its limits", k.Tenant)})
			delete(valid.Keys, h)
		}
	}
	if len(all) == 0 {
		return valid, nil
	}
	return valid, errors.Join(ErrRefused, all)
}

// refuse removes from pl the entry a problem's path names in orig (pl's
// original, which names are looked up in, so that several problems of one
// entry all find it): a plan's or a tenant's override of one policy, a
// tenant, the default plan. Names may hold dots: the longest name present
// wins. It reports false for a path that names no entry.
func refuse(pl, orig *limits.Plans, path string) bool {
	if path == "default_plan" {
		pl.Default = ""
		return true
	}
	if rest, ok := strings.CutPrefix(path, "plans."); ok {
		plan, tail, ok := longest(rest, func(s string) bool { _, ok := orig.Plans[s]; return ok })
		if !ok {
			return false
		}
		if tail == "" {
			delete(pl.Plans, plan)
			return true
		}
		pol, _, ok := longest(tail, func(s string) bool { _, ok := orig.Plans[plan][s]; return ok })
		if !ok {
			return false
		}
		if os, ok := pl.Plans[plan]; ok {
			os = maps.Clone(os)
			delete(os, pol)
			pl.Plans[plan] = os
		}
		return true
	}
	if rest, ok := strings.CutPrefix(path, "tenants."); ok {
		tenant, tail, ok := longest(rest, func(s string) bool { _, ok := orig.Tenants[s]; return ok })
		if !ok {
			return false
		}
		if ovr, ok := strings.CutPrefix(tail, "overrides."); ok {
			pol, _, ok := longest(ovr, func(s string) bool { _, ok := orig.Tenants[tenant].Overrides[s]; return ok })
			if ok {
				if tp, ok := pl.Tenants[tenant]; ok {
					tp.Overrides = maps.Clone(tp.Overrides)
					delete(tp.Overrides, pol)
					pl.Tenants[tenant] = tp
				}
				return true
			}
		}
		delete(pl.Tenants, tenant)
		return true
	}
	return false
}

// longest splits s at the longest prefix that present accepts, ending at
// the end of s or before a dot; tail is what follows the dot.
func longest(s string, present func(string) bool) (name, tail string, ok bool) {
	if present(s) {
		return s, "", true
	}
	for i := len(s) - 1; i > 0; i-- {
		if s[i] == '.' && present(s[:i]) {
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}

// SetTenant replaces one tenant's plan and overrides (tp nil removes it)
// without touching the others or any partition state. An entry the
// policies refuse is not installed; the tenant keeps what it had.
func (d *Directory) SetTenant(tenant string, tp *limits.TenantPlan) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.file == nil {
		return errors.New("directory: SetTenant before Apply")
	}
	if tp != nil {
		pl := limits.Plans{Default: d.data.Plans.Default, Plans: d.data.Plans.Plans, Tenants: map[string]limits.TenantPlan{tenant: *tp}}
		if es := d.file.CheckPlans(d.source, &pl); len(es) > 0 {
			return errors.Join(ErrRefused, es)
		}
	}
	if err := d.next.SetTenant(tenant, tp); err != nil {
		return err
	}
	if d.data.Plans.Tenants == nil {
		d.data.Plans.Tenants = map[string]limits.TenantPlan{}
	}
	if tp == nil {
		delete(d.data.Plans.Tenants, tenant)
	} else {
		d.data.Plans.Tenants[tenant] = *tp
	}
	return nil
}

// SetKey adds or replaces one API key (k nil revokes it). A key the
// policy file refuses is removed, as a load leaves it out: it does not
// stay with the tenant it had.
func (d *Directory) SetKey(h config.KeyHash, k *config.Key) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.data.Keys == nil {
		d.data.Keys = map[config.KeyHash]config.Key{}
	}
	anonymous := k != nil && d.file != nil && k.Tenant == d.file.Identity.AnonymousTenant
	if k == nil || anonymous {
		if err := d.next.SetKey(h, nil); err != nil {
			return err
		}
		delete(d.data.Keys, h)
	}
	if k == nil {
		return nil
	}
	if anonymous {
		return errors.Join(ErrRefused, &config.Error{File: d.source, Path: "keys." + h.ID(), Msg: fmt.Sprintf("%q is the anonymous tenant (identity.anonymous_tenant): callers without a key would share its limits", k.Tenant)})
	}
	if err := d.next.SetKey(h, k); err != nil {
		return err
	}
	d.data.Keys[h] = *k
	return nil
}
