/*
 * Test-only launcher: runs Hadoop's MiniDFSCluster (a real NameNode plus
 * DataNodes in one JVM) on 127.0.0.1 (or the address --host names), prints
 * one ready line on stdout, and
 * lives until stdin closes or SIGTERM/SIGINT arrives. Started by
 * tests/minidfs/start.sh, which the Python harness (tests/harness/minidfs.py)
 * and the Rust tests use. With --kerberos the cluster is secured by a KDC in
 * the same JVM (see KerberosSetup).
 */
package io.sparktrain.minidfs;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.concurrent.CountDownLatch;
import java.util.stream.Stream;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.DFSConfigKeys;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.log4j.Level;
import org.apache.log4j.LogManager;

import sun.misc.Signal;

public final class MiniDfsLauncher {
  static final String READY_PREFIX = "MINIDFS_READY ";
  private static final String LOOPBACK = "127.0.0.1";

  private static final String USAGE = String.join(
      "\n",
      "usage: start.sh [options]",
      "  --datanodes N        number of DataNodes (default 1)",
      "  --port P             NameNode RPC port, 0 = pick a free one (default 0)",
      "  --host ADDR          the IPv4 address clients reach the cluster at (default",
      "                       127.0.0.1); not with --kerberos",
      "  --base-dir DIR       cluster storage; must be absent or empty, deleted at exit",
      "                       (default: a fresh temp dir)",
      "  --keep-base-dir      do not delete the base dir at exit (debugging)",
      "  --replication R      dfs.replication (default 1)",
      "  --block-size BYTES   dfs.blocksize, a multiple of 512 (default: Hadoop's)",
      "  --ignore-stdin       do not stop on stdin EOF, only on SIGTERM/SIGINT",
      "                       (for background use where stdin is /dev/null)",
      "  --kerberos           secure the cluster: a KDC (MiniKdc) on 127.0.0.1, Kerberos",
      "                       on RPC, block access tokens, SASL on data transfer",
      "  --protection QOP     with --kerberos: authentication, integrity or privacy, for",
      "                       hadoop.rpc.protection and dfs.data.transfer.protection",
      "                       (default privacy)",
      "  --kerberos-user NAME with --kerberos: the user principal to create (default alice)",
      "  --conf KEY=VALUE     a Hadoop setting of the cluster's own (repeatable), applied",
      "                       last, e.g. dfs.namenode.delegation.token.max-lifetime=60000",
      "  -h, --help           show this help",
      "Prints '" + READY_PREFIX + "hdfs://<host>:<port>' on stdout once the cluster is up;",
      "with --kerberos the URL is followed by space-separated key=value fields: krb5_conf,",
      "principal, keytab (the user's), conf_dir (a client HADOOP_CONF_DIR), token_file (the",
      "user's HDFS delegation token, for HADOOP_TOKEN_FILE_LOCATION) and protection.");

  /** Parsed command line; plain fields because this is a test tool. */
  static final class Options {
    int datanodes = 1;
    int port = 0;
    String host = LOOPBACK;
    Path baseDir = null;
    boolean keepBaseDir = false;
    short replication = 1;
    long blockSize = -1;
    boolean ignoreStdin = false;
    boolean kerberos = false;
    String protection = null;
    String kerberosUser = null;
    java.util.Map<String, String> settings = new java.util.LinkedHashMap<>();
    boolean help = false;
  }

  /** Thrown for a bad command line; main() turns it into exit status 2. */
  static final class UsageException extends Exception {
    UsageException(String message) {
      super(message);
    }
  }

  private MiniDfsLauncher() {}

  public static void main(String[] args) {
    // stdout is the protocol channel to the harness and carries only the
    // ready line. Keep a private handle on it, and send anything in Hadoop
    // that prints to System.out to stderr with the logs.
    PrintStream stdout = new PrintStream(
        new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
    System.setOut(System.err);

    Options opts;
    try {
      opts = parse(args);
    } catch (UsageException e) {
      System.err.println("minidfs: " + e.getMessage());
      System.err.println(USAGE);
      System.exit(2);
      return;
    }
    if (opts.help) {
      stdout.println(USAGE);
      System.exit(0);
      return;
    }

    try {
      System.exit(run(opts, stdout));
    } catch (Throwable t) {
      t.printStackTrace(System.err);
      // Last, so callers that show only the tail of stderr still see why.
      System.err.println("minidfs: failed to start the cluster: " + t);
      System.exit(1);
    }
  }

  static Options parse(String[] args) throws UsageException {
    Options o = new Options();
    for (int i = 0; i < args.length; i++) {
      String arg = args[i];
      String value = null;
      int eq = arg.indexOf('=');
      if (arg.startsWith("--") && eq > 0) {
        value = arg.substring(eq + 1);
        arg = arg.substring(0, eq);
      }
      switch (arg) {
        case "-h":
        case "--help":
          o.help = true;
          break;
        case "--keep-base-dir":
          o.keepBaseDir = true;
          break;
        case "--ignore-stdin":
          o.ignoreStdin = true;
          break;
        case "--kerberos":
          o.kerberos = true;
          break;
        case "--datanodes":
        case "--port":
        case "--host":
        case "--base-dir":
        case "--replication":
        case "--block-size":
        case "--protection":
        case "--kerberos-user":
        case "--conf":
          if (value == null) {
            if (i + 1 >= args.length) {
              throw new UsageException(arg + " needs a value");
            }
            value = args[++i];
          }
          applyValue(o, arg, value);
          break;
        default:
          throw new UsageException("unknown option: " + args[i]);
      }
    }
    if (!o.kerberos && (o.protection != null || o.kerberosUser != null)) {
      throw new UsageException("--protection and --kerberos-user need --kerberos");
    }
    // The KDC and the service principals name loopback; a secured cluster stays there.
    if (o.kerberos && !o.host.equals(LOOPBACK)) {
      throw new UsageException("--host and --kerberos do not go together");
    }
    return o;
  }

  private static void applyValue(Options o, String name, String value) throws UsageException {
    switch (name) {
      case "--datanodes":
        o.datanodes = (int) parseLong(name, value, 1, 64);
        break;
      case "--port":
        o.port = (int) parseLong(name, value, 0, 65535);
        break;
      case "--host":
        if (!value.matches("\\d{1,3}(\\.\\d{1,3}){3}")) {
          throw new UsageException("--host must be an IPv4 address, got '" + value + "'");
        }
        o.host = value;
        break;
      case "--base-dir":
        if (value.isEmpty()) {
          throw new UsageException("--base-dir must not be empty");
        }
        o.baseDir = Path.of(value).toAbsolutePath().normalize();
        break;
      case "--replication":
        o.replication = (short) parseLong(name, value, 1, Short.MAX_VALUE);
        break;
      case "--block-size":
        o.blockSize = parseLong(name, value, 512, Long.MAX_VALUE);
        // The NameNode rejects block sizes that are not whole checksum chunks.
        if (o.blockSize % 512 != 0) {
          throw new UsageException("--block-size must be a multiple of 512, got " + value);
        }
        break;
      case "--protection":
        if (!KerberosSetup.isProtection(value)) {
          throw new UsageException(
              "--protection must be one of " + String.join(", ", KerberosSetup.PROTECTIONS)
                  + ", got '" + value + "'");
        }
        o.protection = value;
        break;
      case "--conf":
        int sep = value.indexOf('=');
        if (sep <= 0) {
          throw new UsageException("--conf expects KEY=VALUE, got '" + value + "'");
        }
        o.settings.put(value.substring(0, sep), value.substring(sep + 1));
        break;
      case "--kerberos-user":
        // A plain principal name: it also names files and the HDFS home folder.
        if (!value.matches("[a-z_][a-z0-9_-]{0,31}")) {
          throw new UsageException("--kerberos-user must be a plain lower-case user name, got '"
              + value + "'");
        }
        o.kerberosUser = value;
        break;
      default:
        throw new IllegalStateException(name);
    }
  }

  private static long parseLong(String name, String value, long min, long max)
      throws UsageException {
    long v;
    try {
      v = Long.parseLong(value.trim());
    } catch (NumberFormatException e) {
      throw new UsageException(name + " expects an integer, got '" + value + "'");
    }
    if (v < min || v > max) {
      throw new UsageException(name + " must be in [" + min + ", " + max + "], got " + v);
    }
    return v;
  }

  private static Path prepareBaseDir(Options opts) throws IOException, UsageException {
    if (opts.baseDir == null) {
      return Files.createTempDirectory("sparktrain-minidfs-");
    }
    Path dir = opts.baseDir;
    // The Kerberos ready line carries paths under the base dir as space-separated fields.
    if (opts.kerberos && dir.toString().matches(".*[\\s=].*")) {
      throw new UsageException("--base-dir " + dir + " must not contain whitespace or '=' with --kerberos");
    }
    // The cluster formats (wipes) parts of this dir and we delete it at exit,
    // so refuse anything that already holds files: a typo must not cost data.
    if (Files.exists(dir)) {
      if (!Files.isDirectory(dir)) {
        throw new UsageException("--base-dir " + dir + " exists and is not a directory");
      }
      try (Stream<Path> entries = Files.list(dir)) {
        if (entries.findAny().isPresent()) {
          throw new UsageException("--base-dir " + dir + " is not empty");
        }
      }
    } else {
      Files.createDirectories(dir);
    }
    return dir;
  }

  /** A port free on {@code host} now; the NameNode binds it a moment later. */
  private static int freePort(String host) {
    try (java.net.ServerSocket socket = new java.net.ServerSocket()) {
      socket.bind(new java.net.InetSocketAddress(host, 0));
      return socket.getLocalPort();
    } catch (IOException e) {
      throw new java.io.UncheckedIOException("no free port on " + host, e);
    }
  }

  private static Configuration buildConf(Options opts) {
    Configuration conf = new HdfsConfiguration();
    // Every listener on loopback (or on --host). MiniDFSCluster already
    // defaults most of these, but we set them and ask it to keep ours so
    // nothing binds to 0.0.0.0 and the NameNode hands clients DataNode
    // addresses of 127.0.0.1 (or --host).
    String host = opts.host;
    conf.set(DFSConfigKeys.DFS_DATANODE_ADDRESS_KEY, host + ":0");
    conf.set(DFSConfigKeys.DFS_DATANODE_IPC_ADDRESS_KEY, host + ":0");
    conf.set(DFSConfigKeys.DFS_DATANODE_HTTP_ADDRESS_KEY, host + ":0");
    conf.set(DFSConfigKeys.DFS_DATANODE_HTTPS_ADDRESS_KEY, host + ":0");
    conf.set(DFSConfigKeys.DFS_DATANODE_HOST_NAME_KEY, host);
    conf.set(DFSConfigKeys.DFS_NAMENODE_HTTPS_ADDRESS_KEY, host + ":0");
    conf.set(DFSConfigKeys.DFS_NAMENODE_SECONDARY_HTTP_ADDRESS_KEY, host + ":0");
    conf.set(DFSConfigKeys.DFS_NAMENODE_SECONDARY_HTTPS_ADDRESS_KEY, host + ":0");
    if (!host.equals(LOOPBACK)) {
      // MiniDFSCluster puts the NameNode's client RPC on 127.0.0.1 whatever we
      // say; bound to every address of its host, clients elsewhere reach it at
      // --host. The DataNodes talk to it over a service RPC on --host, so the
      // NameNode records (and hands clients) --host as their address, not the
      // 127.0.0.1 a loopback connection would show.
      conf.set(DFSConfigKeys.DFS_NAMENODE_RPC_BIND_HOST_KEY, "0.0.0.0");
      conf.set(DFSConfigKeys.DFS_NAMENODE_SERVICE_RPC_ADDRESS_KEY, host + ":" + freePort(host));
    }

    conf.setInt(DFSConfigKeys.DFS_REPLICATION_KEY, opts.replication);
    // A writer asks for its next block as soon as it has sent the last one; until the
    // DataNode reports that block, the NameNode answers NotReplicatedYetException. Java
    // clients retry that; hdfs-native does not, so on a loaded machine a multi-block write
    // could fail. One committed-but-unreported block is allowed, as busy clusters configure.
    conf.setInt("dfs.namenode.file.close.num-committed-allowed", 1);
    if (opts.blockSize > 0) {
      conf.setLong(DFSConfigKeys.DFS_BLOCK_SIZE_KEY, opts.blockSize);
      // The NameNode's default floor is 1 MiB; tests want tiny blocks to
      // cross block boundaries with little data.
      conf.setLong(
          DFSConfigKeys.DFS_NAMENODE_MIN_BLOCK_SIZE_KEY,
          Math.min(opts.blockSize, DFSConfigKeys.DFS_NAMENODE_MIN_BLOCK_SIZE_DEFAULT));
    }
    return conf;
  }

  private static int run(Options opts, PrintStream stdout) throws Exception {
    Path baseDir;
    try {
      baseDir = prepareBaseDir(opts);
    } catch (UsageException e) {
      System.err.println("minidfs: " + e.getMessage());
      return 2;
    }

    // Released by stdin EOF or a signal; main thread then tears down.
    CountDownLatch stop = new CountDownLatch(1);
    Cleanup cleanup = new Cleanup(baseDir, !opts.keepBaseDir);
    // Safety net for exits we do not route through the latch (SIGHUP, errors).
    Runtime.getRuntime().addShutdownHook(new Thread(cleanup::run, "minidfs-cleanup"));
    // With our own handlers the JVM does not exit 143/130 on its own, so
    // the main thread can shut down in order and exit 0.
    for (String sig : new String[] {"TERM", "INT"}) {
      Signal.handle(new Signal(sig), s -> stop.countDown());
    }

    KerberosSetup kerberos = null;
    if (opts.kerberos) {
      kerberos = new KerberosSetup(
          baseDir.resolve("kerberos"),
          opts.protection == null ? "privacy" : opts.protection,
          opts.kerberosUser == null ? "alice" : opts.kerberosUser);
      cleanup.setKerberos(kerberos);
      // Before buildConf: Hadoop's security classes must first see the KDC's krb5.conf.
      kerberos.startKdc(LOOPBACK);
    }
    Configuration conf = buildConf(opts);
    if (kerberos != null) {
      kerberos.secure(conf);
    }
    opts.settings.forEach(conf::set);
    MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf, baseDir.toFile())
        .numDataNodes(opts.datanodes)
        .nameNodePort(opts.port)
        .checkDataNodeAddrConfig(true)
        .checkDataNodeHostConfig(true)
        .format(true)
        .build();
    cleanup.setCluster(cluster);
    cluster.waitActive();

    if (stop.getCount() == 0) {
      // A signal arrived during start-up: nobody is waiting for us any more.
      cleanup.run();
      return 0;
    }
    String url = "hdfs://" + opts.host + ":" + cluster.getNameNodePort();
    String fields = "";
    if (kerberos != null) {
      kerberos.prepareClient(cluster, conf, url);
      fields = kerberos.readyFields();
    }
    stdout.println(READY_PREFIX + url + fields);
    stdout.flush();

    if (!opts.ignoreStdin) {
      Thread watcher = new Thread(() -> {
        drain(System.in);
        stop.countDown();
      }, "minidfs-stdin-watcher");
      watcher.setDaemon(true);
      watcher.start();
    }

    stop.await();
    cleanup.run();
    return 0;
  }

  /** Reads until EOF or error: either means the parent is gone. */
  private static void drain(InputStream in) {
    byte[] buf = new byte[4096];
    try {
      while (in.read(buf) >= 0) {
        // discard
      }
    } catch (IOException ignored) {
      // A broken stdin is as good as EOF.
    }
  }

  /** Idempotent teardown shared by the main thread and the shutdown hook. */
  private static final class Cleanup {
    private final Path baseDir;
    private final boolean deleteBaseDir;
    private MiniDFSCluster cluster;
    private KerberosSetup kerberos;
    private boolean done;

    Cleanup(Path baseDir, boolean deleteBaseDir) {
      this.baseDir = baseDir;
      this.deleteBaseDir = deleteBaseDir;
    }

    synchronized void setCluster(MiniDFSCluster cluster) {
      this.cluster = cluster;
    }

    synchronized void setKerberos(KerberosSetup kerberos) {
      this.kerberos = kerberos;
    }

    synchronized void run() {
      if (done) {
        return;
      }
      done = true;
      // A deliberate stop makes every daemon thread log its interruption at
      // WARN/ERROR; that is noise in a test log, so only FATAL gets through.
      // Our own teardown problems are printed directly below.
      LogManager.getRootLogger().setLevel(Level.FATAL);
      if (cluster != null) {
        try {
          cluster.shutdown(true);
        } catch (Throwable t) {
          System.err.println("minidfs: error during cluster shutdown: " + t);
        }
      }
      // After the cluster: its daemons talk to the KDC until they stop.
      if (kerberos != null) {
        try {
          kerberos.stop();
        } catch (Throwable t) {
          System.err.println("minidfs: error while stopping the KDC: " + t);
        }
      }
      if (deleteBaseDir) {
        try {
          deleteTree(baseDir);
        } catch (IOException e) {
          System.err.println("minidfs: could not delete " + baseDir + ": " + e);
        }
      }
    }
  }

  private static void deleteTree(Path root) throws IOException {
    if (!Files.exists(root)) {
      return;
    }
    // DataNodes may leave read-only dirs behind; make them writable first.
    Files.walkFileTree(root, new SimpleFileVisitor<>() {
      @Override
      public FileVisitResult preVisitDirectory(Path dir, BasicFileAttributes attrs) {
        dir.toFile().setWritable(true);
        return FileVisitResult.CONTINUE;
      }

      @Override
      public FileVisitResult visitFile(Path file, BasicFileAttributes attrs) throws IOException {
        deleteIfExists(file);
        return FileVisitResult.CONTINUE;
      }

      @Override
      public FileVisitResult postVisitDirectory(Path dir, IOException exc) throws IOException {
        deleteIfExists(dir);
        return FileVisitResult.CONTINUE;
      }
    });
  }

  private static void deleteIfExists(Path p) throws IOException {
    try {
      Files.deleteIfExists(p);
    } catch (NoSuchFileException ignored) {
      // Raced with Hadoop's own cleanup.
    }
  }
}
