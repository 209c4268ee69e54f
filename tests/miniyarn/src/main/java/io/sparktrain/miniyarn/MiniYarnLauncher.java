/*
 * Test-only launcher: runs Hadoop's MiniYARNCluster (a real ResourceManager and
 * NodeManagers in one JVM, containers as local processes) on top of an HDFS
 * given on the command line, writes a Hadoop configuration folder that
 * spark-submit --master yarn can use (HADOOP_CONF_DIR), prints one ready line
 * on stdout, and lives until stdin closes or SIGTERM/SIGINT arrives. Started by
 * tests/miniyarn/start.sh, which tests/harness/miniyarn.py runs.
 *
 * MiniYARNCluster keeps its NodeManagers' local and log folders under
 * ./target/<name> of the working directory: start it in a folder of its own.
 */
package io.sparktrain.miniyarn;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.EnumSet;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.hadoop.yarn.server.nodemanager.containermanager.container.Container;
import org.apache.hadoop.yarn.server.nodemanager.containermanager.container.ContainerState;
import org.apache.log4j.Level;
import org.apache.log4j.LogManager;
import sun.misc.Signal;

public final class MiniYarnLauncher {
  static final String READY_PREFIX = "MINIYARN_READY ";

  private static final String USAGE = String.join(
      "\n",
      "usage: start.sh --default-fs hdfs://HOST:PORT --conf-dir DIR [options]",
      "  --default-fs URL     the cluster's file system (staging, localization); required",
      "  --conf-dir DIR       where to write core-site.xml and yarn-site.xml; required",
      "  --nodemanagers N     number of NodeManagers (default 2)",
      "  --memory-mb MB       memory each NodeManager offers (default 4096)",
      "  --vcores N           cores each NodeManager offers (default 4)",
      "  -h, --help           show this help",
      "Prints '" + READY_PREFIX + "<conf-dir>' on stdout once every NodeManager has registered.");

  /** The classpath resource naming NioLocalFs for the `file` scheme, in this JVM only. */
  private static final String LOCAL_FS_RESOURCE = "miniyarn-local-fs.xml";
  /** Seconds to wait for the ResourceManager's address and the NodeManagers. */
  private static final int START_TIMEOUT_S = 120;
  /** How long a stop waits for containers still running to end by themselves. */
  private static final int CONTAINERS_END_S = 10;
  /** A container's states once its process has ended (or never started). */
  private static final Set<ContainerState> ENDED =
      EnumSet.of(
          ContainerState.LOCALIZATION_FAILED,
          ContainerState.EXITED_WITH_SUCCESS,
          ContainerState.EXITED_WITH_FAILURE,
          ContainerState.CONTAINER_CLEANEDUP_AFTER_KILL,
          ContainerState.CONTAINER_RESOURCES_CLEANINGUP,
          ContainerState.DONE);

  /** Parsed command line; plain fields because this is a test tool. */
  static final class Options {
    String defaultFs;
    Path confDir;
    int nodeManagers = 2;
    int memoryMb = 4096;
    int vcores = 4;
  }

  private MiniYarnLauncher() {}

  public static void main(String[] args) {
    // stdout carries only the ready line; Hadoop's own prints go to stderr.
    PrintStream stdout = new PrintStream(
        new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
    System.setOut(System.err);
    Options opts;
    try {
      opts = parse(args);
    } catch (IllegalArgumentException e) {
      System.err.println("miniyarn: " + e.getMessage());
      System.err.println(USAGE);
      System.exit(2);
      return;
    }
    if (opts == null) {
      stdout.println(USAGE);
      System.exit(0);
      return;
    }
    try {
      System.exit(run(opts, stdout));
    } catch (Throwable t) {
      t.printStackTrace(System.err);
      System.err.println("miniyarn: failed to start the cluster: " + t);
      System.exit(1);
    }
  }

  /** The options, or null for --help; IllegalArgumentException says what is wrong. */
  static Options parse(String[] args) {
    Options o = new Options();
    for (int i = 0; i < args.length; i++) {
      String arg = args[i];
      if (arg.equals("-h") || arg.equals("--help")) {
        return null;
      }
      if (i + 1 >= args.length) {
        throw new IllegalArgumentException(arg + " needs a value (or is unknown)");
      }
      String value = args[++i];
      switch (arg) {
        case "--default-fs" -> o.defaultFs = value;
        case "--conf-dir" -> o.confDir = Path.of(value).toAbsolutePath().normalize();
        case "--nodemanagers" -> o.nodeManagers = positive(arg, value);
        case "--memory-mb" -> o.memoryMb = positive(arg, value);
        case "--vcores" -> o.vcores = positive(arg, value);
        default -> throw new IllegalArgumentException("unknown option: " + arg);
      }
    }
    if (o.defaultFs == null || o.confDir == null) {
      throw new IllegalArgumentException("--default-fs and --conf-dir are required");
    }
    return o;
  }

  private static int positive(String name, String value) {
    try {
      int v = Integer.parseInt(value.trim());
      if (v > 0) {
        return v;
      }
    } catch (NumberFormatException ignored) {
      // reported below
    }
    throw new IllegalArgumentException(name + " expects a positive integer, got '" + value + "'");
  }

  static YarnConfiguration buildConf(Options opts) {
    YarnConfiguration conf = new YarnConfiguration();
    conf.set("fs.defaultFS", opts.defaultFs);
    conf.setInt(YarnConfiguration.NM_PMEM_MB, opts.memoryMb);
    conf.setInt(YarnConfiguration.NM_VCORES, opts.vcores);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 64);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, opts.memoryMb);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_VCORES, opts.vcores);
    // The memory offered is a budget, not the machine's: containers are not
    // killed for the virtual or physical memory a JVM happens to map.
    conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
    conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
    // A busy build disk must not mark the NodeManagers unhealthy.
    conf.setFloat(
        YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 100.0f);
    conf.setLong(YarnConfiguration.NM_MIN_PER_DISK_FREE_SPACE_MB, 0);
    // The capacity scheduler lets application masters use 10% of the
    // cluster by default, less than one Spark driver in cluster mode here.
    conf.setFloat("yarn.scheduler.capacity.maximum-am-resource-percent", 1.0f);
    // Containers log where the test can read them after the application ends.
    conf.setBoolean(YarnConfiguration.LOG_AGGREGATION_ENABLED, false);
    conf.setLong(YarnConfiguration.DEBUG_NM_DELETE_DELAY_SEC, 600);
    return conf;
  }

  private static int run(Options opts, PrintStream stdout) throws Exception {
    // Before any Configuration is made: the NodeManagers' local file system (NioLocalFs.java).
    Configuration.addDefaultResource(LOCAL_FS_RESOURCE);
    CountDownLatch stop = new CountDownLatch(1);
    for (String sig : new String[] {"TERM", "INT"}) {
      Signal.handle(new Signal(sig), s -> stop.countDown());
    }
    MiniYARNCluster cluster = new MiniYARNCluster("sparktrain", opts.nodeManagers, 1, 1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> stopQuietly(cluster), "miniyarn-stop"));
    cluster.init(buildConf(opts));
    cluster.start();
    if (!cluster.waitForNodeManagersToConnect(START_TIMEOUT_S * 1000L)) {
      throw new IllegalStateException(
          "the NodeManagers did not register within " + START_TIMEOUT_S + " s");
    }
    // start() can return before the ResourceManager has written its bound
    // address back into the configuration.
    Configuration live = cluster.getConfig();
    long deadline = System.nanoTime() + START_TIMEOUT_S * 1_000_000_000L;
    while (live.get(YarnConfiguration.RM_ADDRESS, "").endsWith(":0")) {
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException("the ResourceManager published no address");
      }
      Thread.sleep(100);
    }
    writeConfDir(opts, live);

    if (stop.getCount() == 0) {
      stopQuietly(cluster);
      return 0;
    }
    stdout.println(READY_PREFIX + opts.confDir);
    stdout.flush();

    Thread watcher = new Thread(() -> {
      drain(System.in);
      stop.countDown();
    }, "miniyarn-stdin-watcher");
    watcher.setDaemon(true);
    watcher.start();
    stop.await();
    // An application that just finished may still be ending its containers: give them a few
    // seconds to go by themselves.
    long ending = System.nanoTime() + CONTAINERS_END_S * 1_000_000_000L;
    while (!noContainerRuns(cluster, opts.nodeManagers) && System.nanoTime() < ending) {
      Thread.sleep(100);
    }
    if (noContainerRuns(cluster, opts.nodeManagers)) {
      // No application's process is left to stop, and the cluster's folders go with the
      // test: a full stop would only wait out each NodeManager's pending log deletions
      // (10 s apiece, over half a minute in all).
      stdout.flush();
      Runtime.getRuntime().halt(0);
    }
    stopQuietly(cluster);
    return 0;
  }

  /**
   * Whether no NodeManager has a container whose process may still run (a stop then has no
   * process to kill). Finished containers stay listed for a while after their process ends.
   */
  private static boolean noContainerRuns(MiniYARNCluster cluster, int nodeManagers) {
    for (int i = 0; i < nodeManagers; i++) {
      for (Container container :
          cluster.getNodeManager(i).getNMContext().getContainers().values()) {
        if (!ENDED.contains(container.getContainerState())) {
          return false;
        }
      }
    }
    return true;
  }

  /** core-site.xml names the file system; yarn-site.xml holds the live cluster's addresses. */
  private static void writeConfDir(Options opts, Configuration live) throws IOException {
    Files.createDirectories(opts.confDir);
    Configuration core = new Configuration(false);
    core.set("fs.defaultFS", opts.defaultFs);
    write(core, opts.confDir.resolve("core-site.xml"));
    // Spark's clients and containers read this folder without this launcher's classes.
    Configuration yarn = new Configuration(live);
    yarn.unset(NioLocalFs.CONF_KEY);
    write(yarn, opts.confDir.resolve("yarn-site.xml"));
  }

  private static void write(Configuration conf, Path file) throws IOException {
    // Written whole, then renamed: a reader never sees half a file.
    Path temp = file.resolveSibling(file.getFileName() + ".tmp");
    try (OutputStream out = Files.newOutputStream(temp)) {
      conf.writeXml(out);
    }
    Files.move(temp, file, java.nio.file.StandardCopyOption.ATOMIC_MOVE);
  }

  private static synchronized void stopQuietly(MiniYARNCluster cluster) {
    if (cluster.isInState(org.apache.hadoop.service.Service.STATE.STOPPED)) {
      return;
    }
    // Stopping makes every daemon thread log its interruption: noise here.
    LogManager.getRootLogger().setLevel(Level.FATAL);
    try {
      cluster.stop();
    } catch (Throwable t) {
      System.err.println("miniyarn: error during cluster shutdown: " + t);
    }
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
}
