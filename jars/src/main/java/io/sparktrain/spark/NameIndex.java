// NameIndex: finds a column by the UTF-8 bytes of a feature name, without making a String per lookup.
package io.sparktrain.spark;

import java.nio.charset.StandardCharsets;

/**
 * An open-addressing hash table from feature names (UTF-8 bytes) to column numbers, looked up
 * straight from the record's bytes: decoding a record allocates no name strings.
 */
final class NameIndex {
  private final byte[][] names;
  private final int[] table;
  private final int mask;

  NameIndex(String[] columns) {
    names = new byte[columns.length][];
    int size = Integer.highestOneBit(Math.max(4, columns.length * 2) - 1) << 1;
    table = new int[size];
    mask = size - 1;
    java.util.Arrays.fill(table, -1);
    for (int c = 0; c < columns.length; c++) {
      names[c] = columns[c].getBytes(StandardCharsets.UTF_8);
      int i = hash(names[c], 0, names[c].length) & mask;
      while (table[i] >= 0) {
        i = (i + 1) & mask;
      }
      table[i] = c;
    }
  }

  /** The name of column {@code c}, as UTF-8 bytes. */
  byte[] name(int c) {
    return names[c];
  }

  /** The column named {@code b[offset, offset + length)}, or -1. */
  int find(byte[] b, int offset, int length) {
    int i = hash(b, offset, length) & mask;
    while (true) {
      int c = table[i];
      if (c < 0) {
        return -1;
      }
      byte[] name = names[c];
      if (name.length == length
          && java.util.Arrays.equals(name, 0, length, b, offset, offset + length)) {
        return c;
      }
      i = (i + 1) & mask;
    }
  }

  private static int hash(byte[] b, int offset, int length) {
    int h = length;
    for (int i = offset; i < offset + length; i++) {
      h = 31 * h + b[i];
    }
    return h ^ (h >>> 16);
  }
}
