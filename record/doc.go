// Package record is the file format of `smtd record` and `smtd replay`: NATS
// messages with their subjects, headers, payloads and arrival times, written
// one after the other so that a stream can be captured once and replayed into
// the daemon, a test or a benchmark as often as needed.
//
// # File format
//
// A recording is a magic string followed by records. Integers are
// little-endian throughout; strings are raw bytes with no terminator:
//
//	file   = magic *record
//	magic  = "SMTDREC" 0x01                      (8 bytes; the last byte is the format version)
//	record = len:u32 body crc:u32                 (len = length of body; crc = CRC-32C (Castagnoli) of body)
//	body   = offset:i64                           (nanoseconds since the first recorded message)
//	         subjlen:u16 subject
//	         npairs:u16 *(klen:u16 key vlen:u32 value)   (headers; a key with several values repeats)
//	         datalen:u32 data
//
// A body must be exactly as long as len says, and len may not exceed
// [MaxRecordSize]. The [Writer] writes header keys in sorted order and the
// values of one key in their order, so that equal messages give equal bytes;
// a key with no value is not written. Readers accept pairs in any order.
//
// Because each record carries its own length and checksum, a file cut short
// by a crash is readable up to its last whole record: [Reader.Next] returns
// io.EOF at a clean end, and an error wrapping [ErrTruncated] (a partial last
// record) or [ErrChecksum] (a damaged record) with the position of the bad
// record in a [*RecordError].
//
// # NATS
//
// [Capture] subscribes to subjects on a core NATS connection and writes what
// arrives; [Replay] publishes a recording, either through core NATS or into
// JetStream with every message acknowledged in order. Both run in the calling
// goroutine and return when done or when their context ends.
package record
