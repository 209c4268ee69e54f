//! Reading a dataset as Arrow record batches, file after file.

use std::io::Read;
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use sparktrain_storage::FileStatus;
use sparktrain_tfrecord::{
    Compression, DEFAULT_MAX_RECORD_BYTES, ExampleBatchReader, ParallelBatchReader, ReaderOptions,
    RecordReader, RecordType, SkippedRegion,
};

use crate::error::{Error, Result};
use crate::files_in_parallel::FilesInParallel;
use crate::infer::{InferOptions, infer_schema_of};
use crate::open::{input_files, open_records};

/// How a dataset is read.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// The schema to read into; `None` infers one from a sample of the files.
    pub schema: Option<SchemaRef>,
    /// The columns to keep, in this order; `None` keeps all.
    pub columns: Option<Vec<String>>,
    /// Most rows per batch. A batch never spans two files.
    pub batch_size: usize,
    /// The files' compression; `None` detects it per file.
    pub compression: Option<Compression>,
    /// Step over corrupt records and report them instead of failing.
    pub skip_corrupt: bool,
    /// The longest record taken; a header claiming more is damage.
    pub max_record_bytes: u64,
    /// Records sampled for inference when no schema is given.
    pub infer_max_records: usize,
    /// What the records hold.
    pub record_type: RecordType,
    /// Threads reading the dataset (1: the calling thread). With at least as many files as
    /// threads, each thread reads whole files, `threads` files at a time; otherwise each file's
    /// records are decoded on `threads` threads. The batches are the same whatever the number.
    pub threads: usize,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            schema: None,
            columns: None,
            batch_size: 65_536,
            compression: None,
            skip_corrupt: false,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            infer_max_records: InferOptions::default().max_records,
            record_type: RecordType::Example,
            threads: 1,
        }
    }
}

/// A damaged region of an input file that was stepped over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedInFile {
    /// The file.
    pub path: String,
    /// Where and what.
    pub region: SkippedRegion,
}

/// Arrow batches from every file of a dataset, in file order.
pub struct DatasetReader {
    files: Vec<FileStatus>,
    next_file: usize,
    current: Option<FileBatches>,
    /// How each file is opened and decoded.
    settings: FileSettings,
    /// Set when whole files are read on several threads.
    in_parallel: Option<FilesInParallel>,
    schema: SchemaRef,
    options: ReadOptions,
    skipped: Vec<SkippedInFile>,
    failed: bool,
}

impl DatasetReader {
    /// Opens the dataset at `path_or_glob` (a folder, a file or a glob).
    pub fn open(path_or_glob: &str, options: ReadOptions) -> Result<Self> {
        if options.batch_size == 0 {
            return Err(Error::InvalidArgument("batch_size must be at least 1".into()));
        }
        if options.threads == 0 {
            return Err(Error::InvalidArgument("threads must be at least 1".into()));
        }
        let files = input_files(path_or_glob)?;
        let full = match &options.schema {
            Some(s) => s.clone(),
            None => {
                let infer = InferOptions {
                    max_records: options.infer_max_records,
                    compression: options.compression,
                    skip_corrupt: options.skip_corrupt,
                    max_record_bytes: options.max_record_bytes,
                    record_type: options.record_type,
                };
                Arc::new(infer_schema_of(&files, &infer)?)
            }
        };
        let schema = match &options.columns {
            None => full,
            Some(columns) => Arc::new(project(&full, columns)?),
        };
        let settings = FileSettings {
            schema: schema.clone(),
            batch_size: options.batch_size,
            record_type: options.record_type,
            compression: options.compression,
            options: ReaderOptions {
                skip_corrupt: options.skip_corrupt,
                max_record_bytes: options.max_record_bytes,
            },
        };
        let in_parallel = (options.threads > 1 && files.len() >= options.threads)
            .then(|| FilesInParallel::new(files.clone(), settings.clone(), options.threads));
        Ok(DatasetReader {
            files,
            next_file: 0,
            current: None,
            settings,
            in_parallel,
            schema,
            options,
            skipped: Vec::new(),
            failed: false,
        })
    }

    /// The schema of the batches.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The input files.
    pub fn files(&self) -> &[FileStatus] {
        &self.files
    }

    /// Damaged regions stepped over so far, in files already finished.
    pub fn skipped(&self) -> &[SkippedInFile] {
        &self.skipped
    }

    fn close_current(&mut self) {
        if let Some(reader) = self.current.take() {
            let path = reader.records().path().to_string();
            self.skipped.extend(
                reader.records().skipped().iter().map(|&region| SkippedInFile { path: path.clone(), region }),
            );
        }
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(files) = &mut self.in_parallel {
            let mut finished = Vec::new();
            let batch = files.next(&mut finished);
            self.skipped.extend(finished.into_iter().map(|(path, region)| SkippedInFile { path, region }));
            return batch.transpose();
        }
        loop {
            if let Some(reader) = &mut self.current {
                match reader.next() {
                    Some(batch) => return batch.map(Some).map_err(Error::from),
                    None => self.close_current(),
                }
            }
            let Some(file) = self.files.get(self.next_file) else { return Ok(None) };
            self.next_file += 1;
            self.current = Some(self.settings.open(&file.url, self.options.threads)?);
        }
    }
}

/// How each file of a dataset is opened and decoded.
#[derive(Clone)]
pub(crate) struct FileSettings {
    schema: SchemaRef,
    batch_size: usize,
    record_type: RecordType,
    compression: Option<Compression>,
    options: ReaderOptions,
}

impl FileSettings {
    /// The batches of `url`, decoded on `threads` threads (1: in the calling thread).
    pub(crate) fn open(&self, url: &str, threads: usize) -> Result<FileBatches> {
        let records = open_records(url, self.compression, self.options)?;
        let (schema, size, kind) = (self.schema.clone(), self.batch_size, self.record_type);
        Ok(if threads > 1 {
            FileBatches::Parallel(ParallelBatchReader::new(records, schema, size, kind, threads)?)
        } else {
            FileBatches::Serial(ExampleBatchReader::with_record_type(records, schema, size, kind)?)
        })
    }
}

/// One file's batches, decoded in the calling thread or on several.
pub(crate) enum FileBatches {
    Serial(ExampleBatchReader<Box<dyn Read + Send>>),
    Parallel(ParallelBatchReader<Box<dyn Read + Send>>),
}

impl FileBatches {
    pub(crate) fn records(&self) -> &RecordReader<Box<dyn Read + Send>> {
        match self {
            FileBatches::Serial(reader) => reader.records(),
            FileBatches::Parallel(reader) => reader.records(),
        }
    }

    pub(crate) fn next(&mut self) -> Option<sparktrain_tfrecord::Result<RecordBatch>> {
        match self {
            FileBatches::Serial(reader) => reader.next(),
            FileBatches::Parallel(reader) => reader.next(),
        }
    }
}

impl Iterator for DatasetReader {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.next_batch().transpose();
        if matches!(item, Some(Err(_))) {
            self.failed = true;
        }
        item
    }
}

/// The fields of `schema` named by `columns`, in that order.
fn project(schema: &Schema, columns: &[String]) -> Result<Schema> {
    let fields = columns
        .iter()
        .map(|c| {
            schema.field_with_name(c).cloned().map_err(|_| {
                let known: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                Error::InvalidArgument(format!("column '{c}' is not in the schema (columns: {known:?})"))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Schema::new(fields))
}
