// Package limits is the vocabulary of limits as plain data: a Policy (what
// it matches, how it partitions, what it counts, with which Algorithm, in
// which Mode), the Plans that give tenants other figures, and the Limit a
// partition is evaluated with. It imports only the standard library and
// does nothing by itself: package admission enforces a Config, stores
// (package backend's implementations) evaluate Limits, and the policy-file
// package (admission/config) produces Configs.
//
// Validate reports every problem at once, each a *FieldError with its path
// ("policies[2].burst: must be > 0"), so a file can be checked offline with
// the same messages a running controller gives.
package limits
