//! Dates, timestamps and decimals: how they are stored in features, and how they come back.
//!
//! | Arrow type | stored as | back from |
//! |---|---|---|
//! | date32, date64 | `int64_list`: days since 1970-01-01 | int64 |
//! | timestamp (any unit, any zone) | `int64_list`: microseconds since the Unix epoch (the UTC instant) | int64 |
//! | decimal128, decimal256 | `bytes_list`: the decimal text with exactly `scale` fraction digits (`"-0.050"`) | bytes |
//!
//! Microseconds are Spark's precision. A nanosecond timestamp with a sub-microsecond part, or a
//! value whose microseconds overflow int64, is an error naming the column and row rather than a
//! silent truncation.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, FixedSizeListArray, GenericListArray, Int64Array, OffsetSizeTrait,
    TimestampMicrosecondArray,
};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{
    DataType, Date64Type, Field, Int32Type, Int64Type, TimeUnit, TimestampMicrosecondType,
};

use crate::error::{Error, Result};
use crate::wire::Kind;

const MS_PER_DAY: i64 = 86_400_000;

/// The feature kind a date, timestamp or decimal type is stored as; `None` for other types.
pub(crate) fn stored_kind(data_type: &DataType) -> Option<Kind> {
    match data_type {
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(..) => Some(Kind::Int64),
        DataType::Decimal128(..) | DataType::Decimal256(..) => Some(Kind::Bytes),
        _ => None,
    }
}

fn arrow_error(column: &str, what: &str) -> impl FnOnce(arrow::error::ArrowError) -> Error {
    let context = format!("column '{column}': {what}");
    move |source| Error::Arrow { context, source }
}

fn strict() -> CastOptions<'static> {
    CastOptions { safe: false, ..Default::default() }
}

/// `array` with its dates, timestamps and decimals (at any list depth) replaced by their stored
/// form: int64 days, int64 microseconds, utf8 text. Other arrays are returned as they are.
pub(crate) fn to_stored(array: &ArrayRef, column: &str) -> Result<ArrayRef> {
    match array.data_type() {
        DataType::List(_) => relist::<i32>(array.as_list::<i32>(), column),
        DataType::LargeList(_) => relist::<i64>(array.as_list::<i64>(), column),
        DataType::FixedSizeList(_, size) => {
            let list = array.as_fixed_size_list();
            let values = to_stored(list.values(), column)?;
            let item = Arc::new(Field::new_list_field(values.data_type().clone(), true));
            let rebuilt = FixedSizeListArray::try_new(item, *size, values, list.nulls().cloned())
                .map_err(arrow_error(column, "rebuilding a list"))?;
            Ok(Arc::new(rebuilt))
        }
        DataType::Date32 => {
            let days = array.as_primitive::<arrow::datatypes::Date32Type>();
            Ok(Arc::new(Int64Array::new(
                days.values().iter().map(|&d| i64::from(d)).collect(),
                days.nulls().cloned(),
            )))
        }
        DataType::Date64 => {
            let ms = array.as_primitive::<Date64Type>();
            let days = ms.values().iter().map(|&v| v.div_euclid(MS_PER_DAY)).collect();
            Ok(Arc::new(Int64Array::new(days, ms.nulls().cloned())))
        }
        DataType::Timestamp(unit, _) => {
            let raw = cast_with_options(array, &DataType::Int64, &strict())
                .map_err(arrow_error(column, "reading timestamps"))?;
            let raw = raw.as_primitive::<Int64Type>();
            let micros = raw
                .values()
                .iter()
                .enumerate()
                .map(|(row, &v)| {
                    let scaled = match unit {
                        TimeUnit::Second => v.checked_mul(1_000_000),
                        TimeUnit::Millisecond => v.checked_mul(1_000),
                        TimeUnit::Microsecond => Some(v),
                        TimeUnit::Nanosecond if v % 1_000 == 0 || array.is_null(row) => Some(v / 1_000),
                        TimeUnit::Nanosecond => {
                            return Err(Error::BadValue {
                                column: column.to_string(),
                                row,
                                reason: format!(
                                    "timestamp {v} ns has a sub-microsecond part, which the stored \
                                     microseconds would lose"
                                ),
                            });
                        }
                    };
                    scaled.or(array.is_null(row).then_some(0)).ok_or_else(|| Error::BadValue {
                        column: column.to_string(),
                        row,
                        reason: format!("timestamp {v} overflows int64 microseconds"),
                    })
                })
                .collect::<Result<Vec<i64>>>()?;
            Ok(Arc::new(Int64Array::new(micros.into(), array.nulls().cloned())))
        }
        DataType::Decimal128(..) | DataType::Decimal256(..) => {
            cast_with_options(array, &DataType::Utf8, &strict())
                .map_err(arrow_error(column, "formatting decimals"))
        }
        _ => Ok(array.clone()),
    }
}

fn relist<O: OffsetSizeTrait>(list: &GenericListArray<O>, column: &str) -> Result<ArrayRef> {
    let values = to_stored(list.values(), column)?;
    if Arc::ptr_eq(&values, list.values()) {
        return Ok(Arc::new(list.clone()));
    }
    let item = Arc::new(Field::new_list_field(values.data_type().clone(), true));
    let rebuilt = GenericListArray::<O>::try_new(item, list.offsets().clone(), values, list.nulls().cloned())
        .map_err(arrow_error(column, "rebuilding a list"))?;
    Ok(Arc::new(rebuilt))
}

/// Converts decoded values (int64, float32, utf8 or binary; nulls kept) to the item type a schema
/// asks for, reading dates as days, timestamps as microseconds and decimals as text.
pub(crate) fn from_stored(values: ArrayRef, target: &DataType, column: &str) -> Result<ArrayRef> {
    let what = || format!("converting to {target}");
    match target {
        DataType::Date32 if values.data_type() == &DataType::Int64 => {
            let days = cast_with_options(&values, &DataType::Int32, &strict())
                .map_err(arrow_error(column, "reading dates (days out of range)"))?;
            let days = days.as_primitive::<Int32Type>().reinterpret_cast::<arrow::datatypes::Date32Type>();
            Ok(Arc::new(days))
        }
        DataType::Date64 if values.data_type() == &DataType::Int64 => {
            let days = values.as_primitive::<Int64Type>();
            let ms = days
                .values()
                .iter()
                .map(|&d| d.checked_mul(MS_PER_DAY))
                .collect::<Option<Vec<i64>>>()
                .ok_or_else(|| {
                Error::InvalidArgument(format!("column '{column}': a date is out of range"))
            })?;
            Ok(Arc::new(arrow::array::Date64Array::new(ms.into(), days.nulls().cloned())))
        }
        DataType::Timestamp(unit, zone) if values.data_type() == &DataType::Int64 => {
            let micros = values.as_primitive::<Int64Type>().reinterpret_cast::<TimestampMicrosecondType>();
            let micros: ArrayRef =
                Arc::new(TimestampMicrosecondArray::from(micros).with_timezone_opt(zone.clone()));
            if *unit == TimeUnit::Microsecond {
                return Ok(micros);
            }
            cast_with_options(&micros, target, &strict()).map_err(arrow_error(column, &what()))
        }
        _ => cast_with_options(&values, target, &strict()).map_err(arrow_error(column, &what())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        Date32Array, Decimal128Array, StringArray, TimestampMillisecondArray, TimestampNanosecondArray,
    };

    #[test]
    fn dates_timestamps_and_decimals_round_trip() {
        let dates: ArrayRef = Arc::new(Date32Array::from(vec![-31, 0, 19_000]));
        let stored = to_stored(&dates, "d").unwrap();
        assert_eq!(stored.as_primitive::<Int64Type>().values().as_ref(), &[-31, 0, 19_000]);
        assert_eq!(from_stored(stored, &DataType::Date32, "d").unwrap().as_ref(), dates.as_ref());

        let ms: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![-1, 1_500]).with_timezone("UTC"));
        let stored = to_stored(&ms, "t").unwrap();
        assert_eq!(stored.as_primitive::<Int64Type>().values().as_ref(), &[-1_000, 1_500_000]);
        let target = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let back = from_stored(stored, &target, "t").unwrap();
        assert_eq!(back.data_type(), &target);
        assert_eq!(back.as_primitive::<TimestampMicrosecondType>().values().as_ref(), &[-1_000, 1_500_000]);

        let dec: ArrayRef =
            Arc::new(Decimal128Array::from(vec![1250, -50, 0]).with_precision_and_scale(10, 3).unwrap());
        let stored = to_stored(&dec, "x").unwrap();
        assert_eq!(
            stored.as_string::<i32>().iter().flatten().collect::<Vec<_>>(),
            ["1.250", "-0.050", "0.000"]
        );
        let back = from_stored(stored, &DataType::Decimal128(10, 3), "x").unwrap();
        assert_eq!(back.as_ref(), dec.as_ref());
    }

    #[test]
    fn sub_microsecond_nanoseconds_are_refused_by_row() {
        let ns: ArrayRef = Arc::new(TimestampNanosecondArray::from(vec![Some(2_000), None, Some(1_001)]));
        let err = to_stored(&ns, "when").unwrap_err();
        assert!(matches!(&err, Error::BadValue { column, row: 2, .. } if column == "when"), "{err}");
    }

    #[test]
    fn nulls_survive_the_round_trip_through_the_decoder() {
        use crate::arrow_to_example::ExampleEncoder;
        use crate::example_to_arrow::ExampleDecoder;
        use arrow::record_batch::RecordBatch;
        let dec: ArrayRef =
            Arc::new(Decimal128Array::from(vec![Some(1), None]).with_precision_and_scale(4, 1).unwrap());
        let day: ArrayRef = Arc::new(Date32Array::from(vec![None, Some(3)]));
        let batch = RecordBatch::try_from_iter(vec![("dec", dec), ("day", day)]).unwrap();
        let mut decoder = ExampleDecoder::new(batch.schema()).unwrap();
        let encoder = ExampleEncoder::new(batch.schema(), &Default::default()).unwrap();
        let mut i = 0;
        encoder
            .encode(&batch, |record| {
                i += 1;
                decoder.push(record, "mem", i)
            })
            .unwrap();
        assert_eq!(decoder.finish().unwrap(), batch);
    }

    #[test]
    fn a_bad_decimal_text_is_an_error() {
        let text: ArrayRef = Arc::new(StringArray::from(vec!["1.5", "abc"]));
        assert!(from_stored(text, &DataType::Decimal128(5, 2), "x").is_err());
    }
}
