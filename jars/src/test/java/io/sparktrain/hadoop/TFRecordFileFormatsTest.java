// TFRecordFileFormatsTest: the OutputFormat and InputFormat on the local file system, plain and compressed, with damage.
package io.sparktrain.hadoop;

import static io.sparktrain.hadoop.HadoopTasks.assertRecordsEqual;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.zip.DeflaterOutputStream;
import java.util.zip.GZIPInputStream;
import java.util.zip.GZIPOutputStream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.BytesWritable;
import org.apache.hadoop.io.compress.DefaultCodec;
import org.apache.hadoop.io.compress.GzipCodec;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class TFRecordFileFormatsTest {
  @TempDir java.nio.file.Path tmp;

  private final Configuration conf = HadoopTasks.localConf();

  /** An empty record, short ones, one over 1 MiB, and binary bytes. */
  private static List<byte[]> sampleRecords() {
    byte[] big = new byte[(1 << 20) + 4097];
    for (int i = 0; i < big.length; i++) {
      big[i] = (byte) (i ^ (i >>> 8) ^ (i >>> 16));
    }
    byte[] all = new byte[256];
    for (int i = 0; i < 256; i++) {
      all[i] = (byte) i;
    }
    return List.of(
        new byte[0],
        "hello".getBytes(StandardCharsets.UTF_8),
        big,
        all,
        new byte[0],
        "last".getBytes(StandardCharsets.UTF_8));
  }

  private Path dir(String name) {
    return new Path(tmp.resolve(name).toUri());
  }

  private static java.nio.file.Path local(Path p) {
    return java.nio.file.Path.of(p.toUri());
  }

  private static byte[] framed(List<byte[]> records) throws IOException {
    return TFRecordIOTest.frame(records.toArray(new byte[0][]));
  }

  @Test
  void plainRoundTrip() throws Exception {
    List<byte[]> records = sampleRecords();
    Path file = HadoopTasks.writeBytes(conf, dir("out"), null, records);
    assertEquals("part-r-00000.tfrecord", file.getName());
    // Exactly the framing, nothing else: no header, no padding.
    assertArrayEquals(framed(records), Files.readAllBytes(local(file)));
    // The folder holds _SUCCESS and Hadoop's hidden .crc files too; the input format skips them.
    assertRecordsEqual(records, HadoopTasks.read(conf, dir("out")));
    assertRecordsEqual(records, HadoopTasks.read(conf, file));
  }

  @Test
  void gzipRoundTripByDefaultCodec() throws Exception {
    List<byte[]> records = sampleRecords();
    Job job = Job.getInstance(conf);
    // Compression switched on by configuration alone, as spark-submit --conf would: GzipCodec.
    job.getConfiguration().setBoolean("mapreduce.output.fileoutputformat.compress", true);
    Path file = HadoopTasks.writeBytes(job.getConfiguration(), dir("out"), null, records);
    assertEquals("part-r-00000.tfrecord.gz", file.getName());
    byte[] bytes = Files.readAllBytes(local(file));
    assertEquals(0x1f, bytes[0] & 0xff);
    assertEquals(0x8b, bytes[1] & 0xff);
    // The JDK's own gzip reader sees exactly the plain framing.
    try (GZIPInputStream in = new GZIPInputStream(new ByteArrayInputStream(bytes))) {
      assertArrayEquals(framed(records), in.readAllBytes());
    }
    assertRecordsEqual(records, HadoopTasks.read(conf, dir("out")));
  }

  @Test
  void gzipStaysTheDefaultAfterTheConfigurationTravels() throws Exception {
    // Spark ships the job's Configuration to executors with write()/readFields(); the default
    // must still be told apart from an explicit setting there.
    Job job = Job.getInstance(conf);
    job.getConfiguration().setBoolean("mapreduce.output.fileoutputformat.compress", true);
    Configuration shipped = new Configuration(false);
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    job.getConfiguration().write(new java.io.DataOutputStream(bytes));
    shipped.readFields(
        new java.io.DataInputStream(new ByteArrayInputStream(bytes.toByteArray())));
    Path file = HadoopTasks.writeBytes(shipped, dir("out"), null, sampleRecords());
    assertEquals("part-r-00000.tfrecord.gz", file.getName());

    // An explicit setting, by key as a PySpark conf dict gives it, wins.
    Configuration explicit = new Configuration(conf);
    explicit.set("mapreduce.output.fileoutputformat.compress", "true");
    explicit.set(
        "mapreduce.output.fileoutputformat.compress.codec",
        "org.apache.hadoop.io.compress.DefaultCodec");
    file = HadoopTasks.writeBytes(explicit, dir("explicit"), null, sampleRecords());
    assertEquals("part-r-00000.tfrecord.deflate", file.getName());
  }

  @Test
  void configuredCodecAndItsExtension() throws Exception {
    List<byte[]> records = sampleRecords();
    Path file = HadoopTasks.writeBytes(conf, dir("out"), DefaultCodec.class, records);
    // DefaultCodec is a zlib stream, named .deflate by Hadoop.
    assertEquals("part-r-00000.tfrecord.deflate", file.getName());
    assertRecordsEqual(records, HadoopTasks.read(conf, file));
    Path gz = HadoopTasks.writeBytes(conf, dir("gz"), GzipCodec.class, records);
    assertEquals("part-r-00000.tfrecord.gz", gz.getName());
    assertRecordsEqual(records, HadoopTasks.read(conf, gz));
  }

  @Test
  void onlyGetLengthBytesOfTheKeyAreWritten() throws Exception {
    // A BytesWritable's backing array is usually longer than its contents, e.g. after set()
    // with less data or setCapacity(); Spark reuses one BytesWritable per task.
    byte[] backing = "payload-and-garbage".getBytes(StandardCharsets.UTF_8);
    BytesWritable a = new BytesWritable(backing, 7);
    BytesWritable b = new BytesWritable();
    b.set("a much longer first value".getBytes(StandardCharsets.UTF_8), 0, 25);
    b.set("tiny".getBytes(StandardCharsets.UTF_8), 0, 4);
    assertTrue(b.getBytes().length > b.getLength());
    BytesWritable c = new BytesWritable(new byte[] {9, 9, 9});
    c.setCapacity(1000);
    Path file = HadoopTasks.write(conf, dir("out"), null, List.of(a, b, c));
    List<byte[]> expected =
        List.of(
            "payload".getBytes(StandardCharsets.UTF_8),
            "tiny".getBytes(StandardCharsets.UTF_8),
            new byte[] {9, 9, 9});
    assertArrayEquals(framed(expected), Files.readAllBytes(local(file)));
    assertRecordsEqual(expected, HadoopTasks.read(conf, file));
  }

  @Test
  void emptyRecordAndEmptyFile() throws Exception {
    Path one = HadoopTasks.writeBytes(conf, dir("one"), null, List.of(new byte[0]));
    assertEquals(16, Files.size(local(one)));
    List<byte[]> back = HadoopTasks.read(conf, one);
    assertEquals(1, back.size());
    assertEquals(0, back.get(0).length);

    Path none = HadoopTasks.writeBytes(conf, dir("none"), null, List.of());
    assertEquals(0, Files.size(local(none)));
    assertTrue(HadoopTasks.read(conf, none).isEmpty());
    Path noneGz = HadoopTasks.writeBytes(conf, dir("none-gz"), GzipCodec.class, List.of());
    assertTrue(HadoopTasks.read(conf, noneGz).isEmpty());
  }

  @Test
  void filesAreNeverSplit() throws Exception {
    Path file = HadoopTasks.writeBytes(conf, dir("out"), null, sampleRecords());
    Job job = Job.getInstance(conf);
    // Ask for tiny splits: the format must still hand out one split per file.
    job.getConfiguration().setLong(FileInputFormat.SPLIT_MAXSIZE, 1024);
    FileInputFormat.setInputPaths(job, file);
    assertEquals(1, new TFRecordFileInputFormat().getSplits(job).size());
    assertTrue(Files.size(local(file)) > 1024 * 1024);
  }

  @Test
  void compressionIsFoundFromContentWhenTheNameSaysNothing() throws Exception {
    List<byte[]> records = sampleRecords();
    byte[] plain = framed(records);

    // TensorFlow users often name GZIP files *.tfrecord.
    ByteArrayOutputStream gz = new ByteArrayOutputStream();
    try (OutputStream z = new GZIPOutputStream(gz)) {
      z.write(plain);
    }
    java.nio.file.Path gzNoExt = tmp.resolve("tf-gzip.tfrecord");
    Files.write(gzNoExt, gz.toByteArray());
    assertRecordsEqual(records, HadoopTasks.read(conf, new Path(gzNoExt.toUri())));

    // ZLIB, as TensorFlow's compression_type="ZLIB" writes it, under sparktrain's .zlib name,
    // and with no telling name at all.
    ByteArrayOutputStream zl = new ByteArrayOutputStream();
    try (OutputStream z = new DeflaterOutputStream(zl)) {
      z.write(plain);
    }
    for (String name : new String[] {"data.tfrecord.zlib", "data.zz", "zlib-noext"}) {
      java.nio.file.Path f = tmp.resolve(name);
      Files.write(f, zl.toByteArray());
      assertRecordsEqual(records, HadoopTasks.read(conf, new Path(f.toUri())));
    }

    // A plain file under a plain name is read as is.
    java.nio.file.Path p = tmp.resolve("plain.bin");
    Files.write(p, plain);
    assertRecordsEqual(records, HadoopTasks.read(conf, new Path(p.toUri())));
  }

  /** Writes {@code bytes} as a lone file and expects the input format to fail on it. */
  private TFRecordCorruptException damaged(String name, byte[] bytes) throws IOException {
    java.nio.file.Path f = tmp.resolve(name);
    Files.write(f, bytes);
    Path path = new Path(f.toUri());
    TFRecordCorruptException e =
        assertThrows(TFRecordCorruptException.class, () -> HadoopTasks.read(conf, path));
    assertEquals(path.toString(), e.getPath());
    assertTrue(e.getMessage().startsWith(path + ": "), e.getMessage());
    assertTrue(e.getMessage().contains("at byte offset " + e.getOffset()), e.getMessage());
    return e;
  }

  @Test
  void everyKindOfDamageNamesFileAndOffset() throws Exception {
    List<byte[]> records = sampleRecords();
    byte[] good = framed(records);
    // Record starts: empty (0), "hello" (16), the big one (37), 256 bytes, empty, "last".
    int bigAt = 37;
    int bigEnd = bigAt + 16 + records.get(2).length;
    int allEnd = bigEnd + 16 + 256;
    int lastAt = allEnd + 16;

    TFRecordCorruptException e = damaged("header.tfrecord", Arrays.copyOf(good, lastAt + 11));
    assertEquals(CorruptionKind.TRUNCATED_HEADER, e.getKind());
    assertEquals(lastAt, e.getOffset());

    byte[] bad = good.clone();
    bad[bigAt + 2] ^= 0x10;
    e = damaged("lencrc.tfrecord", bad);
    assertEquals(CorruptionKind.LENGTH_CRC_MISMATCH, e.getKind());
    assertEquals(bigAt, e.getOffset());

    e = damaged("payload.tfrecord", Arrays.copyOf(good, bigAt + 12 + 500_000));
    assertEquals(CorruptionKind.TRUNCATED_PAYLOAD, e.getKind());
    assertEquals(bigAt, e.getOffset());

    bad = good.clone();
    bad[bigEnd - 100] ^= 0x01;
    e = damaged("crc.tfrecord", bad);
    assertEquals(CorruptionKind.PAYLOAD_CRC_MISMATCH, e.getKind());
    assertEquals(bigAt, e.getOffset());

    e = damaged("text.tfrecord", "name,age\nada,36\n".getBytes(StandardCharsets.UTF_8));
    assertEquals(CorruptionKind.NOT_TFRECORD, e.getKind());
    assertEquals(0, e.getOffset());

    // In a compressed file the offset is in the decompressed stream.
    bad = good.clone();
    bad[allEnd - 1] ^= 0x01;
    ByteArrayOutputStream gz = new ByteArrayOutputStream();
    try (OutputStream z = new GZIPOutputStream(gz)) {
      z.write(bad);
    }
    e = damaged("crc.tfrecord.gz", gz.toByteArray());
    assertEquals(CorruptionKind.PAYLOAD_CRC_MISMATCH, e.getKind());
    assertEquals(bigEnd, e.getOffset());

    // A gzip file cut short is damage of its compression, at the first record not read.
    e = damaged("cut.tfrecord.gz", Arrays.copyOf(gz.toByteArray(), gz.size() / 2));
    assertEquals(CorruptionKind.DAMAGED_COMPRESSION, e.getKind());
    assertTrue(Arrays.asList(0L, 16L, 37L, (long) bigEnd).contains(e.getOffset()), e.getMessage());

    // So is a gzip file whose header is damaged (the decompressor reads it as it is made).
    byte[] badMagic = gz.toByteArray();
    badMagic[1] ^= 0x01;
    e = damaged("magic.tfrecord.gz", badMagic);
    assertEquals(CorruptionKind.DAMAGED_COMPRESSION, e.getKind());
    assertEquals(0, e.getOffset());
  }

  @Test
  void recordsReadBeforeDamageAreDelivered() throws Exception {
    List<byte[]> records = sampleRecords();
    byte[] good = framed(records);
    java.nio.file.Path f = tmp.resolve("tail.tfrecord");
    Files.write(f, Arrays.copyOf(good, good.length - 2));
    TFRecordFileInputFormat format = new TFRecordFileInputFormat();
    Job job = Job.getInstance(conf);
    FileInputFormat.setInputPaths(job, new Path(f.toUri()));
    var split = format.getSplits(job).get(0);
    var task =
        new org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl(
            job.getConfiguration(), new org.apache.hadoop.mapreduce.TaskAttemptID());
    List<byte[]> got = new ArrayList<>();
    try (var reader = format.createRecordReader(split, task)) {
      reader.initialize(split, task);
      TFRecordCorruptException e =
          assertThrows(
              TFRecordCorruptException.class,
              () -> {
                while (reader.nextKeyValue()) {
                  got.add(reader.getCurrentKey().copyBytes());
                }
              });
      assertEquals(CorruptionKind.TRUNCATED_PAYLOAD, e.getKind());
      assertTrue(reader.getProgress() < 1.0f);
    }
    assertRecordsEqual(records.subList(0, records.size() - 1), got);
    assertFalse(got.isEmpty());
  }
}
