// Text: UTF-8 validation, and numbers as the text the Rust decoder gives them in a bytes column.
package io.sparktrain.spark;

import java.math.BigDecimal;

/** Text helpers that must agree with the Rust codec. */
final class Text {
  private Text() {}

  /** Whether {@code b[offset, offset + length)} is valid UTF-8 (as Rust's {@code str::from_utf8}). */
  static boolean isUtf8(byte[] b, int offset, int length) {
    int i = offset;
    int end = offset + length;
    while (i < end) {
      int c = b[i] & 0xff;
      if (c < 0x80) {
        i++;
        continue;
      }
      int n;
      int min;
      if (c >= 0xc2 && c <= 0xdf) {
        n = 1;
        min = 0x80;
      } else if (c >= 0xe0 && c <= 0xef) {
        n = 2;
        min = 0x800;
      } else if (c >= 0xf0 && c <= 0xf4) {
        n = 3;
        min = 0x10000;
      } else {
        return false;
      }
      if (end - i <= n) {
        return false;
      }
      int cp = c & (0x3f >> n);
      for (int k = 1; k <= n; k++) {
        int cc = b[i + k] & 0xff;
        if ((cc & 0xc0) != 0x80) {
          return false;
        }
        cp = (cp << 6) | (cc & 0x3f);
      }
      if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
        return false;
      }
      i += n + 1;
    }
    return true;
  }

  /**
   * A float as Rust's {@code Display} writes it: the shortest digits that read back the same
   * value, never in exponent form ({@code 0.5}, {@code 1}, {@code -0}, {@code 1e30} in full),
   * {@code NaN}, {@code inf}, {@code -inf}.
   */
  static String ofFloat(float f) {
    if (Float.isNaN(f)) {
      return "NaN";
    }
    if (Float.isInfinite(f)) {
      return f > 0 ? "inf" : "-inf";
    }
    if (f == 0) {
      return Float.floatToRawIntBits(f) == 0 ? "0" : "-0";
    }
    return new BigDecimal(Float.toString(f)).stripTrailingZeros().toPlainString();
  }
}
