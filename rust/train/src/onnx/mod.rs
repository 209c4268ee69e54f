//! The exported model as ONNX, for serving outside sparktrain (onnxruntime, Triton, any ONNX
//! runtime): the model's weights and its feature hashing and crossing, in standard operators
//! of opset 18.
//!
//! The graph takes up to three inputs, each `[batch, width]`, and gives one output:
//!
//! - `dense` (float32, one column per dense feature of the spec, in its order; a missing
//!   value is 0), when the spec has dense features;
//! - `keys` (int64) and `missing` (bool), one column per key column
//!   ([`FeatureSpec::key_columns`]), when it has categorical or crossed columns: each value's
//!   64-bit key, which is the integer itself or FNV-1a 64 of a string's UTF-8 bytes, and
//!   whether it is null. The graph hashes the keys into the shared id space exactly as the
//!   engine does ([`hashing`]). Keying strings stays outside the graph: no standard operator
//!   reads a string's bytes. Only Wide&Deep and DeepFM take them: logistic regression and
//!   the MLP read dense features alone. [`FeatureSpec::serving_inputs`] builds the inputs
//!   from Arrow;
//! - `bag_keys_<j>` (int64) and `bag_present_<j>` (bool), `[batch, values_<j>]`, for the
//!   spec's multi-hot column `j` (in its order, listed in the `sparktrain.bag_columns`
//!   metadata), for the models with embeddings: each row's values' keys from the left, padded to
//!   the batch's longest list, and which slots hold a value;
//! - `scores` (float32): the probability of the positive class (`[batch, 1]`) for a binary
//!   model, of every class (`[batch, classes]`) for a softmax model, or the output of a
//!   regression model (`[batch, 1]`).
//!
//! The model's metadata carries the feature spec, the model kind, the loss and the key
//! columns, so a server needs nothing else ([`read_signature`]).

mod graph;
mod hashing;
mod layers;
pub mod proto;

use prost::Message;

use crate::error::{Result, TrainError};
use crate::export::{Exported, ModelKind};
use crate::features::FeatureSpec;
use crate::loss::Loss;
use graph::{Attr, Graph};
use proto::tensor_proto::DataType;
use proto::{GraphProto, ModelProto, OperatorSetIdProto, StringStringEntryProto};

pub use graph::BATCH;

/// The float32 input of dense features.
pub const DENSE: &str = "dense";
/// The int64 input of the categorical values' keys.
pub const KEYS: &str = "keys";
/// The bool input of which categorical values are missing.
pub const MISSING: &str = "missing";
/// The prefix of the int64 inputs of each multi-hot column's keys.
pub const BAG_KEYS: &str = "bag_keys_";
/// The prefix of the bool inputs of which slots of each multi-hot column hold a value.
pub const BAG_PRESENT: &str = "bag_present_";
/// The float32 output of probabilities.
pub const SCORES: &str = "scores";
/// The operator set of the standard domain the graph uses (`BitwiseXor` needs 18).
pub const OPSET: i64 = 18;
/// The IR version the file declares: the oldest one that admits opset 18.
pub const IR_VERSION: i64 = 8;
/// Metadata: the feature spec, as JSON.
pub const META_FEATURES: &str = "sparktrain.features";
/// Metadata: the model kind and shape, as JSON.
pub const META_MODEL: &str = "sparktrain.model";
/// Metadata: the loss the model was trained with.
pub const META_LOSS: &str = "sparktrain.loss";
/// Metadata: the key columns, as a JSON list, in the order of the `keys` input's columns.
pub const META_KEY_COLUMNS: &str = "sparktrain.key_columns";
/// Metadata: the multi-hot columns, as a JSON list, in the order of the `bag_*` inputs.
pub const META_BAG_COLUMNS: &str = "sparktrain.bag_columns";

/// The largest message protobuf encodes (its sizes are 32-bit signed).
const PROTOBUF_LIMIT: usize = i32::MAX as usize;

/// The ONNX model (serialized `ModelProto`) of an exported model.
pub fn to_onnx(model: &Exported) -> Result<Vec<u8>> {
    let spec = model.features();
    let mut g = Graph::default();
    let dense = (spec.dense_width() > 0).then(|| {
        g.input(DENSE, DataType::Float, spec.dense_width());
        DENSE
    });
    // Logistic regression and the MLP read dense features only, whatever else the spec lists.
    let embeds =
        matches!(model.kind(), ModelKind::WideDeep { .. } | ModelKind::DeepFm { .. } | ModelKind::Dcn { .. });
    let ids = (embeds && spec.id_width() > 0).then(|| {
        let width = spec.key_columns().len();
        g.input(KEYS, DataType::Int64, width);
        g.input(MISSING, DataType::Bool, width);
        hashing::ids(&mut g, spec, KEYS, MISSING)
    });
    let mut bags = Vec::new();
    if embeds {
        for (j, column) in spec.multi_hot.iter().enumerate() {
            let (keys, present) = (format!("{BAG_KEYS}{j}"), format!("{BAG_PRESENT}{j}"));
            let width = format!("values_{j}");
            g.ragged_input(&keys, DataType::Int64, &width);
            g.ragged_input(&present, DataType::Bool, &width);
            let ids = hashing::bag_ids(&mut g, spec, j, &keys);
            bags.push(layers::Bag::new(&mut g, ids, &present, column.pooling));
        }
    }
    let logits = layers::logits(&mut g, model, dense, ids.as_deref(), &bags)?;
    let classes = match model.kind() {
        ModelKind::LogisticRegression { outputs } | ModelKind::Mlp { outputs, .. } => *outputs,
        _ => 1,
    };
    match model.loss() {
        Loss::BinaryCrossEntropy => g.node("Sigmoid", &[&logits], &[], SCORES.into()),
        Loss::SoftmaxCrossEntropy => g.node("Softmax", &[&logits], &[Attr::Int("axis", -1)], SCORES.into()),
        Loss::MeanSquaredError => g.node("Identity", &[&logits], &[], SCORES.into()),
    };
    g.output(SCORES, DataType::Float, classes);

    let meta = [
        (META_FEATURES, json(spec)),
        (META_MODEL, json(model.kind())),
        (META_LOSS, model.loss().name().to_string()),
        (META_KEY_COLUMNS, json(&spec.key_columns())),
        (META_BAG_COLUMNS, json(&spec.multi_hot.iter().map(|m| &m.name).collect::<Vec<_>>())),
    ];
    let proto = ModelProto {
        ir_version: Some(IR_VERSION),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(OPSET) }],
        producer_name: Some("sparktrain".into()),
        producer_version: Some(env!("CARGO_PKG_VERSION").into()),
        doc_string: Some(format!("sparktrain {} model", model.kind().name())),
        metadata_props: meta
            .into_iter()
            .map(|(k, v)| StringStringEntryProto { key: Some(k.into()), value: Some(v) })
            .collect(),
        graph: Some(GraphProto {
            name: Some(model.kind().name().into()),
            node: g.nodes,
            initializer: g.initializers,
            input: g.inputs,
            output: g.outputs,
            ..Default::default()
        }),
        ..Default::default()
    };
    let size = proto.encoded_len();
    if size > PROTOBUF_LIMIT {
        return Err(TrainError::InvalidArgument(format!(
            "the {} model takes {size} bytes as ONNX, over protobuf's 2 GiB: give its categorical \
             columns fewer buckets",
            model.kind().name()
        )));
    }
    Ok(proto.encode_to_vec())
}

/// Writes the ONNX model of the export folder `export_dir` to the file `out`; both may be
/// any storage URL. The file appears whole or not at all.
pub fn export_onnx(export_dir: &str, out: &str) -> Result<()> {
    // An ONNX model is one protobuf message, its initializers included: refuse one whose
    // parameters alone are over the limit before its tables are read (they may be larger
    // than this process's memory).
    let dense = Exported::load_without_tables(export_dir)?;
    let parameters = dense.table_bytes() + dense.variable_bytes();
    if parameters > PROTOBUF_LIMIT as u64 {
        return Err(TrainError::InvalidArgument(format!(
            "the {} model in {export_dir} holds {parameters} bytes of parameters, over the 2 GiB \
             that one ONNX file (a protobuf message) holds, and ONNX's external data is not \
             written: score it with sparktrain.predict, which looks up sharded tables' rows \
             where they are, or train it with fewer buckets",
            dense.kind().name()
        )));
    }
    let model = Exported::load(export_dir)?;
    let bytes = to_onnx(&model)?;
    sparktrain_storage::write(out, &bytes, true)?;
    Ok(())
}

/// The feature spec an ONNX model written by [`export_onnx`] carries in its metadata, and the
/// names of the inputs its graph takes.
pub fn read_signature(path: &str) -> Result<(FeatureSpec, Vec<String>)> {
    let bytes = sparktrain_storage::read(path)?;
    let model = ModelProto::decode(bytes.as_slice())
        .map_err(|e| TrainError::format(path, format!("not an ONNX model: {e}")))?;
    let entry = model.metadata_props.iter().find(|p| p.key.as_deref() == Some(META_FEATURES));
    let json = entry.and_then(|p| p.value.as_deref()).ok_or_else(|| {
        TrainError::format(
            path,
            format!("the ONNX model has no '{META_FEATURES}' metadata: not written by sparktrain"),
        )
    })?;
    let spec = serde_json::from_str(json)
        .map_err(|e| TrainError::format(path, format!("metadata '{META_FEATURES}': {e}")))?;
    let inputs = model.graph.iter().flat_map(|g| &g.input).map(|i| i.name().to_string()).collect();
    Ok((spec, inputs))
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("feature specs and model kinds serialize")
}
