//! The ONNX export: every built-in model becomes a well-formed `ModelProto` whose inputs,
//! output and metadata follow the documented contract, and the serving inputs key every
//! categorical value so that hashing the keys gives the engine's own ids. (onnxruntime's
//! scores against the engine's are checked from Python, in `tests/test_onnx_export.py`.)

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int32Array, StringArray, UInt64Array};
use arrow::record_batch::RecordBatch;
use prost::Message;
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
    let model = kind.build(&spec(), 5).unwrap();
    let entries = model.parameters().entries();
    let weights = model.parameters().flat().unwrap();
    let url = dir.to_string_lossy().into_owned();
    sparktrain_train::export::export(&url, kind, &spec(), loss, &entries, &weights).unwrap();
    Exported::load(&url).unwrap()
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
    ];
    for (kind, loss, classes) in kinds {
        let dir = tempfile::tempdir().unwrap();
        let model = exported(&dir.path().join("export"), &kind, loss);
        let bytes = onnx::to_onnx(&model).unwrap();
        let proto = ModelProto::decode(bytes.as_slice()).unwrap();
        assert_eq!(proto.ir_version, Some(onnx::IR_VERSION));
        let graph = proto.graph.unwrap();
        let names: Vec<_> = graph.input.iter().map(|i| i.name().to_string()).collect();
        let embeds = matches!(kind, ModelKind::WideDeep { .. } | ModelKind::DeepFm { .. });
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
