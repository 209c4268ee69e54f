//! Conversions of Python arguments into the crates' types.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use sparktrain_tfrecord::proto::Feature;
use sparktrain_tfrecord::{Compression, RecordType};

use crate::errors::{Error, Result};

/// `None` or a compression name (`"GZIP"`, `"ZLIB"`, `"NONE"`, `""`).
pub fn compression(name: Option<&str>) -> Result<Option<Compression>> {
    name.map(|n| n.parse::<Compression>().map_err(Error::from)).transpose()
}

/// A record type name (`"Example"`, `"SequenceExample"`, `"ByteArray"`, any case).
pub fn record_type(name: &str) -> Result<RecordType> {
    name.parse::<RecordType>().map_err(Error::from)
}

/// A Python value (a scalar or a list of one kind) as the feature written for a null.
fn feature(column: &str, value: &Bound<'_, PyAny>) -> Result<Feature> {
    let items: Vec<Bound<'_, PyAny>> =
        if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
            value.try_iter()?.collect::<PyResult<_>>()?
        } else {
            vec![value.clone()]
        };
    let all = |f: &dyn Fn(&Bound<'_, PyAny>) -> bool| items.iter().all(f);
    if all(&|v| v.is_instance_of::<PyBool>() || v.is_instance_of::<PyInt>()) {
        Ok(Feature::int64s(items.iter().map(|v| v.extract::<i64>()).collect::<PyResult<Vec<_>>>()?))
    } else if all(&|v| v.is_instance_of::<PyFloat>() || v.is_instance_of::<PyInt>()) {
        Ok(Feature::floats(items.iter().map(|v| v.extract::<f32>()).collect::<PyResult<Vec<_>>>()?))
    } else if all(&|v| v.is_instance_of::<PyString>() || v.is_instance_of::<PyBytes>()) {
        let values = items
            .iter()
            .map(|v| match v.cast::<PyString>() {
                Ok(s) => Ok(s.to_str()?.as_bytes().to_vec()),
                Err(_) => Ok(v.extract::<Vec<u8>>()?),
            })
            .collect::<PyResult<Vec<Vec<u8>>>>()?;
        Ok(Feature::bytes(values))
    } else {
        Err(Error::invalid(format!(
            "the default for column '{column}' must be an int, float, str or bytes, or a list of one of them"
        )))
    }
}

/// `{column: default}` as features.
pub fn defaults(dict: Option<&Bound<'_, PyDict>>) -> Result<HashMap<String, Feature>> {
    let mut out = HashMap::new();
    if let Some(dict) = dict {
        for (k, v) in dict.iter() {
            let column: String = k.extract()?;
            let f = feature(&column, &v)?;
            out.insert(column, f);
        }
    }
    Ok(out)
}
