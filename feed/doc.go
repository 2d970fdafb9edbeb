// Package feed turns files into the input messages of an smtd pipeline
// and publishes them through JetStream: photos (PNG, JPEG) converted to
// the pipeline's image shape, video (YUV4MPEG2 streams, raw gray frames or
// image sequences) as numbered frames of a stream, and text one message
// per line or paragraph.
//
// Every message carries a Nats-Msg-Id that depends only on the pipeline
// and the item (its label and content for an image, stream and frame
// index for video, source, position and content for text), so that the
// daemon's input stream, whose duplicate window is 24 hours, drops an item
// sent again: feeding the same files twice, or again after an
// interruption, adds nothing.
package feed
