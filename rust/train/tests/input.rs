//! The feature spec and the input pipeline over real TFRecord files: inference, encoding,
//! sharding that gives every row to exactly one worker, shuffling that repeats with its seed,
//! and errors that name the column or file at fault.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Array, Int64Array, ListArray, StringArray};
use arrow::datatypes::Int64Type;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use sparktrain_dataset::ExampleFileWriter;
use sparktrain_storage::FileStatus;
use sparktrain_train::features::{MultiHot, Pooling};
use sparktrain_train::{Batch, Categorical, Crossed, FeatureSpec, Input, InputOptions, plan_shard};

fn table(rows: std::ops::Range<i64>) -> RecordBatch {
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("label", Arc::new(Int64Array::from_iter_values(rows.clone().map(|i| i % 2)))),
        ("price", Arc::new(Float32Array::from_iter_values(rows.clone().map(|i| i as f32 * 0.5)))),
        ("shop", Arc::new(Int64Array::from_iter_values(rows.clone().map(|i| i % 7)))),
        ("city", Arc::new(StringArray::from_iter_values(rows.clone().map(|i| format!("city{}", i % 3))))),
        ("row", Arc::new(Float32Array::from_iter_values(rows.map(|i| i as f32)))),
    ];
    RecordBatch::try_from_iter(columns).unwrap()
}

fn write_files(dir: &std::path::Path, sizes: &[i64]) -> String {
    let mut start = 0;
    for (i, &n) in sizes.iter().enumerate() {
        let url = dir.join(format!("part-{i:05}.tfrecord")).to_string_lossy().into_owned();
        let mut w = ExampleFileWriter::create(&url, None, false, HashMap::new()).unwrap();
        w.write_batch(&table(start..start + n)).unwrap();
        w.commit().unwrap();
        start += n;
    }
    dir.to_string_lossy().into_owned()
}

#[test]
fn a_spec_is_inferred_from_the_column_types() {
    let schema = table(0..1).schema();
    let spec = FeatureSpec::infer(&schema, "label", 100).unwrap();
    assert_eq!(spec.dense, vec!["price", "row"]);
    assert_eq!(spec.categorical.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), vec!["shop", "city"]);
    let err = FeatureSpec::infer(&schema, "clicked", 100).unwrap_err().to_string();
    assert!(err.contains("'clicked' is not in the data"), "{err}");
    let lists = Schema::new(vec![
        Field::new("label", DataType::Int64, false),
        Field::new("tags", DataType::new_list(DataType::Int32, true), true),
        Field::new("words", DataType::new_list(DataType::Utf8, true), true),
    ]);
    let spec = FeatureSpec::infer(&lists, "label", 100).unwrap();
    let names: Vec<_> = spec.multi_hot.iter().map(|m| (m.name.as_str(), m.buckets, m.pooling)).collect();
    assert_eq!(names, vec![("tags", 100, Pooling::Mean), ("words", 100, Pooling::Mean)]);
    let floats = Schema::new(vec![
        Field::new("label", DataType::Int64, false),
        Field::new("scores", DataType::new_list(DataType::Float32, true), true),
    ]);
    let err = FeatureSpec::infer(&floats, "label", 100).unwrap_err().to_string();
    assert!(err.contains("column 'scores'"), "{err}");
}

/// Row `i`'s tags: `i % 4` values from `i`, none (a null list) for every 11th row.
fn tags(i: i64) -> Option<Vec<Option<i64>>> {
    (i % 11 != 0).then(|| (0..i % 4).map(|k| Some(i * 10 + k)).collect())
}

fn tagged(rows: std::ops::Range<i64>) -> RecordBatch {
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("label", Arc::new(Int64Array::from_iter_values(rows.clone().map(|i| i % 2)))),
        ("row", Arc::new(Float32Array::from_iter_values(rows.clone().map(|i| i as f32)))),
        ("tags", Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(rows.map(tags)))),
    ];
    RecordBatch::try_from_iter(columns).unwrap()
}

fn tag_spec() -> FeatureSpec {
    FeatureSpec {
        dense: vec!["row".into()],
        categorical: vec![],
        crossed: vec![],
        multi_hot: vec![MultiHot { name: "tags".into(), buckets: 1000, pooling: Pooling::Sum }],
        label: "label".into(),
    }
}

#[test]
fn multi_hot_lists_hash_each_value_and_skip_nulls() {
    let mut spec = tag_spec();
    spec.categorical.push(Categorical { name: "shop".into(), buckets: 5 });
    let values = vec![Some(vec![Some(3), None, Some(3)]), None, Some(vec![]), Some(vec![Some(7)])];
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("label", Arc::new(Int64Array::from(vec![0, 1, 0, 1]))),
        ("row", Arc::new(Float32Array::from(vec![0.0, 1.0, 2.0, 3.0]))),
        ("shop", Arc::new(Int64Array::from(vec![1, 2, 3, 1]))),
        ("tags", Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(values))),
    ];
    let e = spec.encode(&RecordBatch::try_from_iter(columns).unwrap()).unwrap();
    assert_eq!(e.bag_lengths, [2, 0, 0, 1]);
    assert_eq!(e.bag_ids[0], e.bag_ids[1], "equal values, equal ids");
    // The multi-hot range comes after the categorical one: ids 5 to 1004.
    assert!(e.bag_ids.iter().all(|id| (5..1005).contains(id)), "{:?}", e.bag_ids);
    assert_eq!(spec.id_space(), 1005);
    assert_eq!(e.bag_offsets(), [0, 2, 2, 2, 3]);

    let clash = FeatureSpec { dense: vec!["tags".into()], ..tag_spec() };
    assert!(clash.validate().unwrap_err().to_string().contains("'tags' is a list"));
    let flat: Vec<(&str, ArrayRef)> = vec![
        ("label", Arc::new(Int64Array::from(vec![0]))),
        ("row", Arc::new(Float32Array::from(vec![0.0]))),
        ("tags", Arc::new(Int64Array::from(vec![4]))),
    ];
    let err = tag_spec().encode(&RecordBatch::try_from_iter(flat).unwrap()).unwrap_err().to_string();
    assert!(err.contains("multi-hot column 'tags' has type Int64"), "{err}");
}

#[test]
fn shuffled_batches_keep_each_rows_lists_with_it() {
    let dir = tempfile::tempdir().unwrap();
    for (i, range) in [0..150i64, 150..300].into_iter().enumerate() {
        let url = dir.path().join(format!("part-{i}.tfrecord")).to_string_lossy().into_owned();
        let mut w = ExampleFileWriter::create(&url, None, false, HashMap::new()).unwrap();
        w.write_batch(&tagged(range)).unwrap();
        w.commit().unwrap();
    }
    let spec = Arc::new(tag_spec());
    for shuffle_buffer in [0, 64] {
        let options = InputOptions { batch_size: 32, shuffle_buffer, seed: 4, prefetch: 2 };
        let input = Input::open(&dir.path().to_string_lossy(), 1, 0, options).unwrap();
        let mut seen = 0;
        for batch in input.epoch(0, &spec).unwrap() {
            let batch = batch.unwrap();
            let offsets = batch.bag_offsets();
            for r in 0..batch.rows {
                let row = batch.dense[r] as i64;
                let alone = spec.encode(&tagged(row..row + 1)).unwrap();
                assert_eq!(&batch.bag_ids[offsets[r]..offsets[r + 1]], alone.bag_ids.as_slice(), "row {row}");
                assert_eq!(batch.bag_lengths[r], alone.bag_lengths[0]);
            }
            assert_eq!(batch.pooling, vec![Pooling::Sum]);
            Batch::from_encoded(&batch).unwrap();
            seen += batch.rows;
        }
        assert_eq!(seen, 300, "shuffle_buffer={shuffle_buffer}");
    }
}

#[test]
fn encoding_hashes_into_each_columns_own_id_range() {
    let spec = FeatureSpec {
        dense: vec!["price".into()],
        categorical: vec![
            Categorical { name: "shop".into(), buckets: 5 },
            Categorical { name: "city".into(), buckets: 4 },
        ],
        crossed: vec![Crossed { names: vec!["shop".into(), "city".into()], buckets: 11 }],
        multi_hot: vec![],
        label: "label".into(),
    };
    let e = spec.encode(&table(0..42)).unwrap();
    assert_eq!((e.rows, e.dense.len(), e.ids.len(), e.labels.len()), (42, 42, 126, 42));
    assert_eq!(e.dense[3], 1.5);
    assert_eq!(e.labels[..4], [0.0, 1.0, 0.0, 1.0]);
    for row in e.ids.chunks(3) {
        assert!(row[0] < 5 && (5..9).contains(&row[1]) && (9..20).contains(&row[2]), "{row:?}");
    }
    // Equal values get equal ids, in every batch and process: rows 0 and 21 agree on shop
    // (0) and city (0).
    assert_eq!(e.ids[..3], e.ids[63..66]);
    assert_eq!(spec.id_space(), 20);

    let json = serde_json::to_string(&spec).unwrap();
    assert_eq!(serde_json::from_str::<FeatureSpec>(&json).unwrap(), spec);

    let mut columns: Vec<(&str, ArrayRef)> = vec![("label", Arc::new(Int64Array::from(vec![Some(1), None])))];
    columns.push(("price", Arc::new(Float32Array::from(vec![None, Some(2.0)]))));
    let holes = RecordBatch::try_from_iter(columns).unwrap();
    let dense_only = FeatureSpec {
        dense: vec!["price".into()],
        categorical: vec![],
        crossed: vec![],
        multi_hot: vec![],
        label: "label".into(),
    };
    let err = dense_only.encode(&holes).unwrap_err().to_string();
    assert!(err.contains("'label' is empty in row 1"), "{err}");
}

fn status(url: &str, size: u64) -> FileStatus {
    FileStatus { url: url.into(), size, is_dir: false, modified_ms: 0 }
}

#[test]
fn whole_files_are_balanced_by_size_and_few_files_are_interleaved() {
    let files = [status("a", 100), status("b", 60), status("c", 50), status("d", 40), status("e", 10)];
    let shards: Vec<_> = (0..2).map(|w| plan_shard(&files, 2, w)).collect();
    // Largest first, each to the lighter worker: a | b, c | d | e, so 140 and 120 bytes.
    assert_eq!(shards[0].files, vec!["a", "d"]);
    assert_eq!(shards[1].files, vec!["b", "c", "e"]);
    assert!(shards.iter().all(|s| s.interleave.is_none()));
    let few = plan_shard(&files[..1], 3, 2);
    assert_eq!((few.files, few.interleave), (vec!["a".to_string()], Some((3, 2))));
}

fn rows_of(input: &Input, epoch: u64) -> (Vec<usize>, Vec<f32>) {
    let mut sizes = Vec::new();
    let mut rows = Vec::new();
    let spec = Arc::new(FeatureSpec::infer(&table(0..1).schema(), "label", 50).unwrap());
    for batch in input.epoch(epoch, &spec).unwrap() {
        let batch = batch.unwrap();
        sizes.push(batch.rows);
        // "row" is the last dense column.
        rows.extend(batch.dense.chunks(2).map(|d| d[1]));
        let tensors = Batch::from_encoded(&batch).unwrap();
        assert_eq!(tensors.dense.dims(), [batch.rows, 2]);
    }
    (sizes, rows)
}

#[test]
fn every_row_goes_to_exactly_one_worker_each_epoch_shuffled_by_seed() {
    let dir = tempfile::tempdir().unwrap();
    for (sizes, workers) in [(vec![300i64, 200, 120, 80], 2), (vec![500], 3)] {
        let sub = dir.path().join(format!("{}-{workers}", sizes.len()));
        std::fs::create_dir(&sub).unwrap();
        let path = write_files(&sub, &sizes);
        let total: i64 = sizes.iter().sum();
        let options = InputOptions { batch_size: 64, shuffle_buffer: 100, seed: 9, prefetch: 2 };
        let inputs: Vec<Input> =
            (0..workers).map(|w| Input::open(&path, workers, w, options.clone()).unwrap()).collect();
        for epoch in 0..2 {
            let mut all: Vec<f32> = Vec::new();
            for input in &inputs {
                let (sizes, rows) = rows_of(input, epoch);
                assert!(sizes[..sizes.len() - 1].iter().all(|&s| s == 64), "{sizes:?}");
                all.extend(rows);
            }
            all.sort_by(f32::total_cmp);
            assert_eq!(all, (0..total).map(|i| i as f32).collect::<Vec<_>>(), "epoch {epoch}");
        }
        let first = rows_of(&inputs[0], 0).1;
        assert_eq!(first, rows_of(&inputs[0], 0).1, "the same seed and epoch repeat");
        assert_ne!(first, rows_of(&inputs[0], 1).1, "another epoch, another order");
    }
}

#[test]
fn a_damaged_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_files(dir.path(), &[50, 50]);
    let victim = dir.path().join("part-00001.tfrecord");
    let mut bytes = std::fs::read(&victim).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&victim, bytes).unwrap();
    let spec = Arc::new(FeatureSpec::infer(&table(0..1).schema(), "label", 50).unwrap());
    let options = InputOptions { shuffle_buffer: 0, ..InputOptions::default() };
    let input = Input::open(&format!("{path}/part-00000.tfrecord"), 1, 0, options.clone());
    assert!(input.unwrap().epoch(0, &spec).unwrap().all(|b| b.is_ok()));
    // The damage is found while sampling the schema, or else while reading.
    let err = match Input::open(&path, 1, 0, options) {
        Err(e) => e.to_string(),
        Ok(input) => {
            input.epoch(0, &spec).unwrap().find_map(|b| b.err()).expect("the damage is found").to_string()
        }
    };
    assert!(err.contains("part-00001.tfrecord") && err.contains("offset"), "{err}");
}

#[test]
fn a_dense_value_that_is_not_finite_is_refused_naming_its_column_and_row() {
    let spec = FeatureSpec::infer(&table(0..1).schema(), "label", 100).unwrap();
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut batch = table(0..4);
        let price = Float32Array::from(vec![1.0, 0.5, bad, 2.0]);
        let at = batch.schema().index_of("price").unwrap();
        let mut columns = batch.columns().to_vec();
        columns[at] = Arc::new(price);
        batch = RecordBatch::try_new(batch.schema(), columns).unwrap();
        let err = spec.encode(&batch).unwrap_err().to_string();
        assert!(err.contains("'price'") && err.contains("row 2"), "{err}");
    }
    // A null is not refused: it becomes 0.
    let mut columns = table(0..2).columns().to_vec();
    columns[1] = Arc::new(Float32Array::from(vec![None, Some(1.0)]));
    let nullable = Schema::new(
        table(0..2)
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    );
    let nulls = RecordBatch::try_new(Arc::new(nullable), columns).unwrap();
    assert_eq!(spec.encode(&nulls).unwrap().dense[..2], [0.0, 0.0]);
}
