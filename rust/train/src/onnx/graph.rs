//! A small builder of ONNX graphs: nodes with one output each, named initializers, and the
//! typed graph inputs and outputs with a symbolic batch dimension.

use super::proto::{
    AttributeProto, NodeProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
    attribute_proto::AttributeType, tensor_proto::DataType, tensor_shape_proto, type_proto,
};

/// The name of the batch dimension of every input and output.
pub const BATCH: &str = "batch";

/// A graph under construction.
#[derive(Default)]
pub(crate) struct Graph {
    pub(crate) nodes: Vec<NodeProto>,
    pub(crate) initializers: Vec<TensorProto>,
    pub(crate) inputs: Vec<ValueInfoProto>,
    pub(crate) outputs: Vec<ValueInfoProto>,
    next: usize,
}

/// A node attribute.
pub(crate) enum Attr {
    Int(&'static str, i64),
    Text(&'static str, &'static str),
}

impl Attr {
    fn proto(&self) -> AttributeProto {
        match *self {
            Attr::Int(name, v) => AttributeProto {
                name: Some(name.into()),
                r#type: Some(AttributeType::Int as i32),
                i: Some(v),
                ..Default::default()
            },
            Attr::Text(name, v) => AttributeProto {
                name: Some(name.into()),
                r#type: Some(AttributeType::String as i32),
                s: Some(v.as_bytes().to_vec()),
                ..Default::default()
            },
        }
    }
}

impl Graph {
    /// A value name not used before, readable in a graph viewer: `{hint}_{n}`.
    fn fresh(&mut self, hint: &str) -> String {
        self.next += 1;
        format!("{hint}_{}", self.next)
    }

    /// Adds a node of the standard domain; returns the name of its one output.
    pub(crate) fn op(&mut self, op: &str, inputs: &[&str], attrs: &[Attr]) -> String {
        let output = self.fresh(&op.to_ascii_lowercase());
        self.node(op, inputs, attrs, output)
    }

    /// Adds a node whose one output is the value (a graph output) called `output`.
    pub(crate) fn node(&mut self, op: &str, inputs: &[&str], attrs: &[Attr], output: String) -> String {
        self.nodes.push(NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![output.clone()],
            name: Some(format!("{output}_node")),
            op_type: Some(op.into()),
            attribute: attrs.iter().map(Attr::proto).collect(),
            ..Default::default()
        });
        output
    }

    fn initializer(&mut self, name: String, dims: &[usize], data_type: DataType, raw: Vec<u8>) -> String {
        self.initializers.push(TensorProto {
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: Some(data_type as i32),
            name: Some(name.clone()),
            raw_data: Some(raw),
            ..Default::default()
        });
        name
    }

    /// A float32 initializer called `name` (a model parameter keeps its own name).
    pub(crate) fn floats(&mut self, name: &str, dims: &[usize], values: &[f32]) -> String {
        let raw = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.initializer(name.into(), dims, DataType::Float, raw)
    }

    /// An int64 constant.
    pub(crate) fn int64s(&mut self, hint: &str, dims: &[usize], values: &[i64]) -> String {
        let name = self.fresh(hint);
        let raw = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.initializer(name, dims, DataType::Int64, raw)
    }

    /// A uint64 constant.
    pub(crate) fn uint64s(&mut self, hint: &str, dims: &[usize], values: &[u64]) -> String {
        let name = self.fresh(hint);
        let raw = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.initializer(name, dims, DataType::Uint64, raw)
    }

    /// A uint64 scalar constant.
    pub(crate) fn uint64(&mut self, hint: &str, value: u64) -> String {
        self.uint64s(hint, &[], &[value])
    }

    /// Declares the graph input `name` of `data_type`, shaped `[batch, width]`.
    pub(crate) fn input(&mut self, name: &str, data_type: DataType, width: usize) {
        self.inputs.push(value_info(name, data_type, Width::Fixed(width)));
    }

    /// Declares the graph input `name` of `data_type`, shaped `[batch, width]` with a width
    /// that each call chooses, named `width`.
    pub(crate) fn ragged_input(&mut self, name: &str, data_type: DataType, width: &str) {
        self.inputs.push(value_info(name, data_type, Width::Named(width)));
    }

    /// Declares the graph output `name` of `data_type`, shaped `[batch, width]`.
    pub(crate) fn output(&mut self, name: &str, data_type: DataType, width: usize) {
        self.outputs.push(value_info(name, data_type, Width::Fixed(width)));
    }
}

/// The second dimension of an input or output.
enum Width<'a> {
    Fixed(usize),
    Named(&'a str),
}

fn value_info(name: &str, data_type: DataType, width: Width<'_>) -> ValueInfoProto {
    use tensor_shape_proto::{Dimension, dimension::Value};
    let width = match width {
        Width::Fixed(n) => Value::DimValue(n as i64),
        Width::Named(n) => Value::DimParam(n.into()),
    };
    let dims = [Value::DimParam(BATCH.into()), width];
    let tensor = type_proto::Tensor {
        elem_type: Some(data_type as i32),
        shape: Some(TensorShapeProto {
            dim: dims.into_iter().map(|v| Dimension { value: Some(v), ..Default::default() }).collect(),
        }),
    };
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto { value: Some(type_proto::Value::TensorType(tensor)), ..Default::default() }),
        ..Default::default()
    }
}
