//! Decoding on several threads gives exactly what decoding in one does: the same batches in
//! the same order, the same error naming the same record, the same skip report.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Array, Int64Array, ListArray, StringArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use sparktrain_tfrecord::{
    Error, ExampleBatchReader, ExampleEncoder, ParallelBatchReader, ReaderOptions, RecordReader, RecordType,
    RecordWriter,
};

/// `rows` Examples with a scalar, a float, a string with nulls and a ragged list, as one
/// uncompressed TFRecord stream.
fn stream(rows: i64) -> (Vec<u8>, SchemaRef) {
    let batch = RecordBatch::try_from_iter(vec![
        ("id", Arc::new(Int64Array::from_iter_values(0..rows)) as ArrayRef),
        ("x", Arc::new(Float32Array::from_iter_values((0..rows).map(|i| i as f32 * 0.5))) as ArrayRef),
        (
            "s",
            Arc::new(StringArray::from_iter((0..rows).map(|i| (i % 5 != 0).then(|| format!("v{i}")))))
                as ArrayRef,
        ),
        (
            "tags",
            Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(
                (0..rows).map(|i| Some((0..i % 4).map(Some).collect::<Vec<_>>())),
            )) as ArrayRef,
        ),
    ])
    .unwrap();
    let encoder = ExampleEncoder::new(batch.schema(), &HashMap::new()).unwrap();
    let mut writer = RecordWriter::new(Vec::new());
    encoder.write_batch(&batch, &mut writer).unwrap();
    (writer.into_inner().unwrap(), batch.schema())
}

fn records(data: &[u8], skip_corrupt: bool) -> RecordReader<&[u8]> {
    RecordReader::new(data, "part-0.tfrecord", ReaderOptions { skip_corrupt, ..Default::default() })
}

fn serial(data: &[u8], schema: &SchemaRef, batch_size: usize) -> Vec<Result<RecordBatch, String>> {
    let reader = ExampleBatchReader::new(records(data, false), schema.clone(), batch_size).unwrap();
    reader.map(|b| b.map_err(|e| e.to_string())).collect()
}

fn parallel(
    data: &[u8],
    schema: &SchemaRef,
    batch_size: usize,
    threads: usize,
) -> Vec<Result<RecordBatch, String>> {
    let reader = ParallelBatchReader::new(
        records(data, false),
        schema.clone(),
        batch_size,
        RecordType::Example,
        threads,
    )
    .unwrap();
    reader.map(|b| b.map_err(|e| e.to_string())).collect()
}

#[test]
fn batches_are_those_of_the_serial_reader_for_any_batch_size_and_thread_count() {
    let (data, schema) = stream(20_000);
    for batch_size in [1, 999, 4096, 5000, 65_536] {
        let expected = serial(&data, &schema, batch_size);
        for threads in [1, 2, 3, 8] {
            let got = parallel(&data, &schema, batch_size, threads);
            assert_eq!(got.len(), expected.len(), "batch_size {batch_size}, {threads} threads");
            assert!(got == expected, "batch_size {batch_size}, {threads} threads: batches differ");
        }
    }
}

#[test]
fn an_empty_stream_gives_no_batch() {
    let (_, schema) = stream(1);
    assert!(parallel(&[], &schema, 100, 4).is_empty());
}

#[test]
fn a_record_that_does_not_fit_fails_naming_it_and_ends_the_reader() {
    let (data, _) = stream(10_000);
    // "s" holds strings; read as int64 it fails at the first record that has one (record 1).
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("s", DataType::Int64, true),
    ]));
    let expected = serial(&data, &schema, 4096);
    let got = parallel(&data, &schema, 4096, 4);
    assert_eq!(got.len(), 1, "the reader ends at the first error");
    assert_eq!(got[0], expected[0]);
    let message = got[0].as_ref().unwrap_err();
    assert!(message.contains("part-0.tfrecord: record 1, feature 's'"), "{message}");
}

#[test]
fn a_value_too_wide_for_its_column_fails_naming_its_file_and_record() {
    let (data, _) = stream(10_000);
    // "id" counts up from 0: read as int8 it overflows at record 128, in the first batch or
    // (batches of 100) in the second; as list<int8>, "tags" never does.
    let schema = Arc::new(Schema::new(vec![
        Field::new("tags", DataType::List(Arc::new(Field::new_list_field(DataType::Int8, true))), true),
        Field::new("id", DataType::Int8, true),
    ]));
    for batch_size in [4096, 100] {
        let expected = serial(&data, &schema, batch_size);
        let failed = expected.iter().position(Result::is_err).expect("an error");
        assert_eq!(failed, 128 / batch_size, "the batches before it are read");
        let message = expected[failed].as_ref().unwrap_err();
        assert!(message.starts_with("part-0.tfrecord: record 128, feature 'id': "), "{message}");
        assert!(message.contains("does not fit Int8") && message.contains("128"), "{message}");
        for threads in [1, 3] {
            let got = parallel(&data, &schema, batch_size, threads);
            assert_eq!(got[..], expected[..=failed], "{threads} threads, batches of {batch_size}");
        }
    }
}

#[test]
fn damaged_framing_is_reported_at_its_offset_or_skipped() {
    let (mut data, schema) = stream(10_000);
    let offset = data.len() / 2;
    data[offset] ^= 0xff;

    let mut reader =
        ParallelBatchReader::new(records(&data, false), schema.clone(), 4096, RecordType::Example, 3)
            .unwrap();
    let failure = reader.by_ref().find_map(|b| b.err()).expect("the damage is found");
    assert!(matches!(failure, Error::Corrupt { .. }), "{failure}");
    assert!(failure.to_string().starts_with("part-0.tfrecord: "), "{failure}");
    assert!(reader.next().is_none(), "the reader ends after an error");

    let mut skipping =
        ParallelBatchReader::new(records(&data, true), schema.clone(), 4096, RecordType::Example, 3).unwrap();
    let rows: usize = skipping.by_ref().map(|b| b.unwrap().num_rows()).sum();
    let serial_rows: usize = ExampleBatchReader::new(records(&data, true), schema, 4096)
        .unwrap()
        .map(|b| b.unwrap().num_rows())
        .sum();
    assert_eq!(rows, serial_rows);
    assert!(rows < 10_000);
    assert_eq!(skipping.records().skipped().len(), 1);
}

/// Damage fails the parallel reader where it fails the serial one: the same batches before it,
/// then the same error naming the file and offset. A payload's CRC is checked on a decoder
/// thread, a header's while reading; both surface in stream order, after the rows before them.
#[test]
fn damage_fails_in_the_same_place_as_serially() {
    let (clean, schema) = stream(10_000);
    // The first record's payload, one in the middle, a header in the middle, the last CRC.
    let header_in_middle = {
        let mut r = records(&clean, false);
        (0..5_000).for_each(|_| drop(r.next()));
        r.offset() as usize + 3
    };
    for at in [20, clean.len() / 2, header_in_middle, clean.len() - 2] {
        let mut data = clean.clone();
        data[at] ^= 0x01;
        let expected = serial(&data, &schema, 1000);
        assert!(expected.last().unwrap().as_ref().unwrap_err().contains("offset"), "byte {at}");
        for threads in [2, 4] {
            let got = parallel(&data, &schema, 1000, threads);
            assert!(got == expected, "byte {at}, {threads} threads: {:?}", got.last());
        }
    }
}

#[test]
fn zero_threads_or_rows_are_refused() {
    let (data, schema) = stream(10);
    for (batch_size, threads) in [(0, 2), (10, 0)] {
        let refused = ParallelBatchReader::new(
            records(&data, false),
            schema.clone(),
            batch_size,
            RecordType::Example,
            threads,
        );
        assert!(matches!(refused, Err(Error::InvalidArgument(_))));
    }
}
