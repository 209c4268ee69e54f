// Package documentation for io.sparktrain.spark.

/**
 * The Spark SQL file format {@code tfrecord}: {@link io.sparktrain.spark.TFRecordFileFormat}
 * reads and writes TFRecord files of {@code tf.train.Example}s, {@code SequenceExample}s or raw
 * bytes, with the bytes and the type table of sparktrain's Rust codec and Python data source.
 *
 * <p>Writing: {@link io.sparktrain.spark.ExampleEncoder} (rows to records) and {@link
 * io.sparktrain.spark.TFRecordOutputWriter} (framing, compression). Reading: {@link
 * io.sparktrain.spark.RecordScanner} (framing, splits, damage), {@link
 * io.sparktrain.spark.ExampleDecoder} (records to rows) and {@link
 * io.sparktrain.spark.SchemaInference}.
 */
package io.sparktrain.spark;
