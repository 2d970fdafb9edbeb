// Package bench holds the measurement commands behind `smtd bench NAME
// [flags]`. Every measurement quoted for the project is one of these
// commands, so anyone can rerun it on their own machine and data.
//
// Each command is a function
//
//	func Name(ctx context.Context, w io.Writer, args []string) error
//
// that parses its own flags (args excludes NAME), reads real data from a
// directory the user can point it at (the defaults are the project's
// ../shared/data folder), and prints one "name: value" line per figure to
// w, with lowercase snake_case names and unit suffixes (_per_s, _gflops,
// _mib, _seconds). Lines named machine_* describe the machine and build
// (CPU model, GOMAXPROCS, Go version, BLAS implementation) so that figures
// from different machines are not compared blindly. A command stops early
// when ctx is cancelled.
package bench
