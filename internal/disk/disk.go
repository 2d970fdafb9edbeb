// Package disk tells how much room a file system has left, for the
// daemon's storage watch and the fault benches that fill a disk.
package disk
