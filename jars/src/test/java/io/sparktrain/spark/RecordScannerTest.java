// RecordScannerTest: splits of an uncompressed file own each record exactly once; damage is reported or skipped.
package io.sparktrain.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.sparktrain.hadoop.CorruptionKind;
import io.sparktrain.hadoop.TFRecordCorruptException;
import io.sparktrain.hadoop.TFRecordIO;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

class RecordScannerTest {
  static byte[] file(List<byte[]> records) throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    for (byte[] r : records) {
      TFRecordIO.writeRecord(out, r);
    }
    return out.toByteArray();
  }

  static List<byte[]> randomRecords(int n, long seed) {
    return randomRecords(n, seed, 300);
  }

  static List<byte[]> randomRecords(int n, long seed, int large) {
    Random random = new Random(seed);
    List<byte[]> out = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      // Every 7th record up to `large` bytes (over the 64 KiB read chunk), the others small.
      byte[] r = new byte[i % 7 == 0 ? random.nextInt(large) : random.nextInt(300)];
      random.nextBytes(r);
      out.add(r);
    }
    return out;
  }

  /** The records of the split [start, end) of {@code data}, as Spark's reader takes them. */
  static List<byte[]> split(byte[] data, long start, long end, boolean skip) throws IOException {
    List<byte[]> out = new ArrayList<>();
    ByteArrayInputStream in = new ByteArrayInputStream(data, (int) start, data.length - (int) start);
    try (RecordScanner s = new RecordScanner(in, "mem", start, skip, 1 << 20)) {
      if (start > 0) {
        s.syncForward();
      }
      while (s.next(end)) {
        out.add(java.util.Arrays.copyOfRange(s.data(), s.payloadStart(), s.payloadStart() + s.payloadLength()));
      }
    }
    return out;
  }

  @Test
  void everyRecordBelongsToExactlyOneSplit() throws IOException {
    // Tiny splits over small records, and larger splits over records bigger than a read chunk.
    checkSplits(randomRecords(40, 1, 300), new int[] {1, 7, 12, 16, 100});
    checkSplits(randomRecords(60, 2, 200_000), new int[] {4096, 65_536, 100_000, 1 << 30});
  }

  @Test
  void aRecordHoldingTFRecordFramesFailsTheSplitInsteadOfStartingTheNextOneInsideIt() throws IOException {
    // Each record's bytes are a small TFRecord file: frames that pass every check of a record.
    List<byte[]> records = new ArrayList<>();
    for (List<byte[]> inner : List.of(randomRecords(3, 3), randomRecords(5, 4), randomRecords(2, 5))) {
      records.add(file(inner));
    }
    byte[] data = file(records);
    int refused = 0;
    for (int size = 1; size <= data.length; size++) {
      List<byte[]> got = new ArrayList<>();
      try {
        for (long start = 0; start < data.length; start += size) {
          got.addAll(split(data, start, Math.min(start + size, data.length), false));
        }
      } catch (IOException e) {
        assertTrue(e.getMessage().startsWith("mem: cannot be read in splits"), e.getMessage());
        refused++;
        continue;
      }
      // Where no split ends inside a record that holds frames, every record is read once.
      assertEquals(records.size(), got.size(), "split size " + size);
      for (int i = 0; i < records.size(); i++) {
        assertArrayEquals(records.get(i), got.get(i), "record " + i + ", split size " + size);
      }
    }
    assertTrue(refused > 0, "some split size must fall inside a record's frames");
    assertEquals(records.size(), split(data, 0, data.length, false).size());
  }

  private static void checkSplits(List<byte[]> records, int[] sizes) throws IOException {
    byte[] data = file(records);
    for (int size : sizes) {
      List<byte[]> got = new ArrayList<>();
      for (long start = 0; start < data.length; start += size) {
        got.addAll(split(data, start, Math.min(start + size, data.length), false));
      }
      assertEquals(records.size(), got.size(), "split size " + size);
      for (int i = 0; i < records.size(); i++) {
        assertArrayEquals(records.get(i), got.get(i), "record " + i + ", split size " + size);
      }
    }
  }

  /** The records a scanner over {@code in} reads, with the regions it skipped. */
  private static List<byte[]> readAll(RecordScanner s) throws IOException {
    List<byte[]> out = new ArrayList<>();
    while (s.next(Long.MAX_VALUE)) {
      out.add(java.util.Arrays.copyOfRange(s.data(), s.payloadStart(), s.payloadStart() + s.payloadLength()));
    }
    return out;
  }

  private static long offsetOf(List<byte[]> records, int index) {
    long at = 0;
    for (int i = 0; i < index; i++) {
      at += records.get(i).length + 16;
    }
    return at;
  }

  @Test
  void aDamagedCompressedStreamIsDamageAndKeepsTheRecordsBeforeIt() throws IOException {
    List<byte[]> records = randomRecords(400, 11);
    byte[] plain = file(records);
    for (Compression c : new Compression[] {Compression.GZIP, Compression.ZLIB}) {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream();
      try (java.io.OutputStream out = c.compress(bytes)) {
        out.write(plain);
      }
      byte[] whole = bytes.toByteArray();
      byte[] flipped = whole.clone();
      flipped[whole.length / 2] ^= (byte) 0xff;
      byte[] header = whole.clone();
      header[1] ^= (byte) 0x01; // GZIP's magic, ZLIB's header check
      byte[][] damaged = {
        java.util.Arrays.copyOf(whole, whole.length / 2), // cut short
        java.util.Arrays.copyOf(whole, whole.length - 3), // its trailer cut
        flipped,
        header,
      };
      for (byte[] d : damaged) {
        List<byte[]> strict = new ArrayList<>();
        TFRecordCorruptException e =
            assertThrows(
                TFRecordCorruptException.class,
                () -> {
                  try (RecordScanner s =
                      new RecordScanner(c.decompress(new ByteArrayInputStream(d)), "part-0.gz", 0, false, 1 << 20)) {
                    while (s.next(Long.MAX_VALUE)) {
                      strict.add(new byte[0]);
                    }
                  }
                },
                c.name());
        assertTrue(
            e.getKind() == CorruptionKind.DAMAGED_COMPRESSION
                || e.getKind() == CorruptionKind.PAYLOAD_CRC_MISMATCH,
            c + ": " + e.getMessage());
        assertEquals(offsetOf(records, strict.size()), e.getOffset(), e.getMessage());

        try (RecordScanner s =
            new RecordScanner(c.decompress(new ByteArrayInputStream(d)), "part-0.gz", 0, true, 1 << 20)) {
          List<byte[]> kept = readAll(s);
          assertTrue(kept.size() >= strict.size(), c.name());
          if (s.skipped().size() == 1) {
            // Only the decompressor's failure: the records before it, in order.
            for (int i = 0; i < kept.size(); i++) {
              assertArrayEquals(records.get(i), kept.get(i));
            }
          }
          RecordScanner.Skipped last = s.skipped().get(s.skipped().size() - 1);
          assertEquals(CorruptionKind.DAMAGED_COMPRESSION, last.kind, c + ": " + s.skipped());
        }
      }
    }
  }

  @Test
  void aFailingReadOfTheCompressedFileStaysAnIoError() throws IOException {
    byte[] plain = file(randomRecords(400, 12));
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (java.io.OutputStream out = Compression.GZIP.compress(bytes)) {
      out.write(plain);
    }
    byte[] whole = bytes.toByteArray();
    java.io.InputStream failing =
        new java.io.FilterInputStream(new ByteArrayInputStream(whole, 0, whole.length / 2)) {
          @Override
          public int read(byte[] b, int off, int len) throws IOException {
            int n = super.read(b, off, len);
            if (n < 0) {
              throw new IOException("block lost on datanode");
            }
            return n;
          }
        };
    try (RecordScanner s = new RecordScanner(Compression.GZIP.decompress(failing), "x.gz", 0, true, 1 << 20)) {
      IOException e = assertThrows(IOException.class, () -> readAll(s));
      assertEquals("block lost on datanode", e.getMessage());
      assertTrue(s.skipped().isEmpty());
    }
  }

  @Test
  void damageNamesTheOffset() throws IOException {
    List<byte[]> records = randomRecords(5, 2);
    byte[] data = file(records);
    int second = 12 + records.get(0).length + 4;
    data[second + 12] ^= 1; // first payload byte of record 1
    TFRecordCorruptException e = assertThrows(TFRecordCorruptException.class, () -> split(data, 0, data.length, false));
    assertEquals(CorruptionKind.PAYLOAD_CRC_MISMATCH, e.getKind());
    assertEquals(second, e.getOffset());
    assertTrue(e.getMessage().startsWith("mem: record payload CRC mismatch at byte offset " + second), e.getMessage());
    List<byte[]> kept = split(data, 0, data.length, true);
    assertEquals(4, kept.size());
    assertArrayEquals(records.get(2), kept.get(1));
  }

  @Test
  void damagedHeaderIsSkippedToTheNextRecord() throws IOException {
    List<byte[]> records = randomRecords(6, 3);
    byte[] data = file(records);
    int third = 12 + records.get(0).length + 4 + 12 + records.get(1).length + 4;
    data[third + 2] ^= 0x40; // the length of record 2
    assertThrows(TFRecordCorruptException.class, () -> split(data, 0, data.length, false));
    List<byte[]> kept = split(data, 0, data.length, true);
    assertEquals(5, kept.size());
    assertArrayEquals(records.get(3), kept.get(2));
  }

  @Test
  void garbageRightAfterASplitsLastRecordIsReported() throws IOException {
    List<byte[]> records = randomRecords(4, 4);
    byte[] good = file(records);
    int first = 12 + records.get(0).length + 4;
    byte[] data = new byte[good.length + 5];
    System.arraycopy(good, 0, data, 0, first);
    System.arraycopy(good, first, data, first + 5, good.length - first);
    // Five stray bytes at `first`, the end of the split [0, first): that split must report them.
    assertThrows(TFRecordCorruptException.class, () -> split(data, 0, first, false));
    assertEquals(3, split(data, first, data.length, false).size());
  }

  @Test
  void notATFRecordFileSaysSo() {
    byte[] gzip = {0x1f, (byte) 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6};
    TFRecordCorruptException e = assertThrows(TFRecordCorruptException.class, () -> split(gzip, 0, gzip.length, false));
    assertEquals(CorruptionKind.NOT_TFRECORD, e.getKind());
    assertTrue(e.getMessage().contains("gzip-compressed"), e.getMessage());
  }
}
