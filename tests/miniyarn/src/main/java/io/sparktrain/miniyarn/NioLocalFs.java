/*
 * The NodeManagers' local file system, with permissions set through java.nio.
 *
 * Without Hadoop's native library (which no Maven artifact carries), RawLocalFileSystem sets a
 * permission by starting a `chmod` process. A NodeManager localizing an archive sets the
 * permission of every file it unpacked, one at a time: a shipped Python environment of 9,000
 * files took 45 s per NodeManager here, for each application, before its first container could
 * start. A real cluster's NodeManagers have the native library and call chmod(2) directly, as
 * this does through java.nio. The launcher names this class as the `file` scheme's
 * AbstractFileSystem (what FileContext, and so the NodeManagers, use) in its JVM only.
 */
package io.sparktrain.miniyarn;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.local.LocalConfigKeys;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/** Hadoop's LocalFs (checksummed local files), on {@link NioRawLocalFileSystem}. */
public final class NioLocalFs extends ChecksumFs {
  /** The conf key FileContext reads the `file` scheme's implementation from. */
  static final String CONF_KEY = "fs.AbstractFileSystem.file.impl";

  public NioLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(new Raw(uri, conf));
  }

  /** Hadoop's RawLocalFs, delegating to the file system below instead of its own. */
  static final class Raw extends DelegateToFileSystem {
    Raw(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new NioRawLocalFileSystem(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1; // no port for file:
    }

    @Override
    public FsServerDefaults getServerDefaults(Path f) throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    @Deprecated
    public FsServerDefaults getServerDefaults() throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public boolean isValidName(String src) {
      return true; // any local path
    }
  }

  /** RawLocalFileSystem whose setPermission is one system call, not one process. */
  public static final class NioRawLocalFileSystem extends RawLocalFileSystem {
    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      if (NativeIO.isAvailable()) {
        super.setPermission(p, permission);
        return;
      }
      Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission.toShort()));
    }

    /** The nine rwx bits of `mode` (the sticky bit, which java.nio cannot set, is not used). */
    static Set<PosixFilePermission> posix(short mode) {
      PosixFilePermission[] bits = {
        PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE,
        PosixFilePermission.OTHERS_READ, PosixFilePermission.GROUP_EXECUTE,
        PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
        PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE,
        PosixFilePermission.OWNER_READ,
      };
      Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
      for (int i = 0; i < bits.length; i++) {
        if ((mode & (1 << i)) != 0) {
          set.add(bits[i]);
        }
      }
      return set;
    }
  }
}
