//! One routine that pushes arbitrary bytes through every reading path of the crate, shared by
//! the fuzz target (`rust/tfrecord/fuzz`) and the mutation test, so both exercise the same code.

use std::sync::Arc;

use prost::Message;

use crate::proto::{Event, Example, SequenceExample};
use crate::{Compression, ExampleDecoder, ReaderOptions, RecordReader, SchemaInference};

/// Reads `data` as a TFRecord stream (plain and through each decompressor, strict and
/// skipping), and every record it yields as an `Example` (inferred schema, then decoded),
/// `SequenceExample` and `Event`. Returns the number of records seen. Any panic is a bug.
pub fn exercise(data: &[u8]) -> usize {
    let mut seen = 0;
    for compression in [Compression::None, Compression::Gzip, Compression::Zlib] {
        for skip_corrupt in [false, true] {
            let stream = compression.decoder(data);
            let mut reader =
                RecordReader::new(stream, "fuzz", ReaderOptions { skip_corrupt, ..Default::default() });
            let mut records = Vec::new();
            while let Some(Ok(record)) = reader.next() {
                records.push(record.to_vec());
                if records.len() > 64 {
                    break;
                }
            }
            seen += records.len();
            decode_all(&records);
        }
    }
    // The payload decoders also see the raw input, as if it were one record.
    decode_all(&[data.to_vec()]);
    seen
}

fn decode_all(records: &[Vec<u8>]) {
    let mut inference = SchemaInference::new();
    for (i, r) in records.iter().enumerate() {
        let _ = inference.observe(r, "fuzz", i as u64);
        let _ = Example::decode(r.as_slice());
        let _ = SequenceExample::decode(r.as_slice());
        let _ = Event::decode(r.as_slice());
    }
    if let Ok(mut decoder) = ExampleDecoder::new(Arc::new(inference.schema())) {
        for (i, r) in records.iter().enumerate() {
            let _ = decoder.push(r, "fuzz", i as u64);
        }
        let _ = decoder.finish();
    }
}
