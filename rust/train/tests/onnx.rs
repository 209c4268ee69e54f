//! The ONNX export: every built-in model becomes a well-formed `ModelProto` whose inputs,
//! output and metadata follow the documented contract (multi-hot columns as padded inputs of
//! their own), and the serving inputs key every categorical value so that hashing the keys
//! gives the engine's own ids. (onnxruntime's
//! scores against the engine's are checked from Python, in `tests/test_onnx_export.py`.)

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int32Array, ListArray, StringArray, UInt64Array};
use arrow::datatypes::Int32Type;
use arrow::record_batch::RecordBatch;
use prost::Message;
use sparktrain_train::features::{MultiHot, Pooling};
use sparktrain_train::onnx::proto::{ModelProto, type_proto};
use sparktrain_train::onnx::{self, DENSE, KEYS, MISSING, SCORES};
use sparktrain_train::{Categorical, Crossed, Exported, FeatureSpec, Loss, ModelKind, TrainError};

fn spec() -> FeatureSpec {
    FeatureSpec {
        dense: vec!["x".into()],
        categorical: vec![
            Categorical { name: "shop".into(), buckets: 7 },
            Categorical { name: "city".into(), buckets: 5 },
        ],
        crossed: vec![Crossed { names: vec!["city".into(), "day".into()], buckets: 11 }],
        multi_hot: vec![],
        label: "label".into(),
    }
}

fn batch() -> RecordBatch {
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("x", Arc::new(Float64Array::from(vec![Some(0.5), None, Some(-2.0)]))),
        ("shop", Arc::new(Int32Array::from(vec![Some(-3), Some(4), None]))),
        ("city", Arc::new(StringArray::from(vec![Some("paris"), None, Some("")]))),
        ("day", Arc::new(UInt64Array::from(vec![u64::MAX, 1, 2]))),
    ];
    RecordBatch::try_from_iter(columns).unwrap()
}

/// An export folder of `kind` with weights drawn from a seed.
fn exported(dir: &std::path::Path, kind: &ModelKind, loss: Loss) -> Exported {
    exported_for(dir, kind, loss, &spec())
}

/// [`exported`] for the feature spec `spec`.
fn exported_for(dir: &std::path::Path, kind: &ModelKind, loss: Loss, spec: &FeatureSpec) -> Exported {
    let model = kind.build(spec, 5).unwrap();
    let entries = model.parameters().entries();
    let weights = model.parameters().flat().unwrap();
    let url = dir.to_string_lossy().into_owned();
    sparktrain_train::export::export(&url, kind, spec, &Default::default(), loss, &entries, &weights)
        .unwrap();
    Exported::load(&url).unwrap()
}

#[test]
fn multi_hot_columns_become_padded_inputs_of_their_own() {
    let spec = FeatureSpec {
        multi_hot: vec![
            MultiHot { name: "tags".into(), buckets: 9, pooling: Pooling::Mean },
            MultiHot { name: "words".into(), buckets: 4, pooling: Pooling::Sum },
        ],
        ..spec()
    };
    let dir = tempfile::tempdir().unwrap();
    let kind = ModelKind::DeepFm { dim: 2, hidden: vec![4] };
    let model = exported_for(dir.path(), &kind, Loss::BinaryCrossEntropy, &spec);
    let proto = ModelProto::decode(onnx::to_onnx(&model).unwrap().as_slice()).unwrap();
    let graph = proto.graph.unwrap();
    let names: Vec<_> = graph.input.iter().map(|i| i.name().to_string()).collect();
    assert_eq!(names, [DENSE, KEYS, MISSING, "bag_keys_0", "bag_present_0", "bag_keys_1", "bag_present_1"]);
    let bag_columns = proto.metadata_props.iter().find(|p| p.key() == onnx::META_BAG_COLUMNS).unwrap();
    assert_eq!(bag_columns.value(), r#"["tags","words"]"#);

    let tags = vec![Some(vec![Some(5), Some(6)]), None, Some(vec![Some(7), None, Some(8)])];
    let words = vec![Some(vec![]), Some(vec![Some(1)]), None];
    let base = batch();
    let schema = base.schema();
    let mut columns: Vec<(&str, ArrayRef)> =
        schema.fields().iter().map(|f| f.name().as_str()).zip(base.columns().iter().cloned()).collect();
    columns.push(("tags", Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(tags))));
    columns.push(("words", Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(words))));
    let inputs = spec.serving_inputs(&RecordBatch::try_from_iter(columns).unwrap()).unwrap();
    assert_eq!(inputs.bags.len(), 2);
    // Each row's values from the left, padded to the longest list; nulls are not values.
    assert_eq!(inputs.bags[0].width, 2);
    assert_eq!(inputs.bags[0].keys, [5, 6, 0, 0, 7, 8]);
    assert_eq!(inputs.bags[0].present, [true, true, false, false, true, true]);
    // A column with no value anywhere still has one (empty) slot per row.
    assert_eq!(
        (inputs.bags[1].width, inputs.bags[1].present.as_slice()),
        (1, [false, true, false].as_slice())
    );
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

#[test]
fn serving_inputs_key_each_value_as_documented() {
    let inputs = spec().serving_inputs(&batch()).unwrap();
    assert_eq!(spec().key_columns(), ["shop", "city", "day"]);
    assert_eq!(inputs.rows, 3);
    assert_eq!(inputs.dense, [0.5, 0.0, -2.0]);
    let paris = fnv1a(b"paris") as i64;
    let empty = fnv1a(b"") as i64;
    assert_eq!(inputs.keys, [-3, paris, -1, 4, 0, 1, 0, empty, 2]);
    assert_eq!(inputs.missing, [false, false, false, false, true, false, true, false, false]);
}

#[test]
fn every_model_becomes_onnx_with_the_documented_signature() {
    let kinds = [
        (ModelKind::LogisticRegression { outputs: 1 }, Loss::BinaryCrossEntropy, 1),
        (ModelKind::Mlp { hidden: vec![4, 3], outputs: 3 }, Loss::SoftmaxCrossEntropy, 3),
        (ModelKind::WideDeep { dim: 2, hidden: vec![4] }, Loss::BinaryCrossEntropy, 1),
        (ModelKind::DeepFm { dim: 2, hidden: vec![4] }, Loss::BinaryCrossEntropy, 1),
        (ModelKind::Dcn { dim: 2, hidden: vec![4], cross_layers: 2 }, Loss::BinaryCrossEntropy, 1),
        (ModelKind::Mlp { hidden: vec![4], outputs: 1 }, Loss::MeanSquaredError, 1),
    ];
    for (kind, loss, classes) in kinds {
        let dir = tempfile::tempdir().unwrap();
        let model = exported(&dir.path().join("export"), &kind, loss);
        let bytes = onnx::to_onnx(&model).unwrap();
        let proto = ModelProto::decode(bytes.as_slice()).unwrap();
        assert_eq!(proto.ir_version, Some(onnx::IR_VERSION));
        let graph = proto.graph.unwrap();
        let names: Vec<_> = graph.input.iter().map(|i| i.name().to_string()).collect();
        let embeds =
            matches!(kind, ModelKind::WideDeep { .. } | ModelKind::DeepFm { .. } | ModelKind::Dcn { .. });
        let expected: &[&str] = if embeds { &[DENSE, KEYS, MISSING] } else { &[DENSE] };
        assert_eq!(names, expected, "{kind:?}");
        assert_eq!(graph.output.len(), 1);
        assert_eq!(graph.output[0].name(), SCORES);
        let Some(type_proto::Value::TensorType(t)) = &graph.output[0].r#type.as_ref().unwrap().value else {
            panic!("a tensor output")
        };
        assert_eq!(
            t.shape.as_ref().unwrap().dim[1].value,
            Some(onnx::proto::tensor_shape_proto::dimension::Value::DimValue(classes))
        );
        // Every parameter travels under its own name.
        for entry in model_entries(&kind) {
            assert!(graph.initializer.iter().any(|t| t.name() == entry), "{kind:?} lacks {entry}");
        }

        let file = dir.path().join("model.onnx").to_string_lossy().into_owned();
        onnx::export_onnx(&dir.path().join("export").to_string_lossy(), &file).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), bytes);
        let (features, inputs) = onnx::read_signature(&file).unwrap();
        assert_eq!(features, spec());
        assert_eq!(inputs, expected);
    }
}

fn model_entries(kind: &ModelKind) -> Vec<String> {
    kind.build(&spec(), 0).unwrap().parameters().entries().into_iter().map(|e| e.name).collect()
}

#[test]
fn a_missing_export_and_a_foreign_file_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing").to_string_lossy().into_owned();
    let out = dir.path().join("m.onnx").to_string_lossy().into_owned();
    let err = onnx::export_onnx(&missing, &out).unwrap_err();
    assert!(matches!(err, TrainError::Storage(_)) && err.to_string().contains("nothing"), "{err}");

    std::fs::write(&out, b"\xff\xff not protobuf").unwrap();
    let err = onnx::read_signature(&out).unwrap_err();
    assert!(matches!(err, TrainError::Format { .. }) && err.to_string().contains("m.onnx"), "{err}");
}
