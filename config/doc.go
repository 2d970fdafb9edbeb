// Package config is smtd's configuration: one YAML file, its documented
// defaults, strict decoding and validation, and which fields may change
// while the daemon runs.
//
// Loading follows Prometheus' config.Load: the whole file is decoded
// strictly (unknown keys and wrong types are errors), absent fields take
// their defaults, and the result is validated across fields. Every problem
// is reported at once, each naming the file, the line and the field:
//
//	smtd.yaml:14: pipelines[0].kmeans.atoms: must be in 1..1048576, got 0
//
// The fully commented example.yaml beside this file is the reference of
// every field; it is exactly the built-in default (a test keeps it so).
package config
