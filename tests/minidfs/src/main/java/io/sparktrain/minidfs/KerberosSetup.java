/*
 * The launcher's Kerberos mode: a real KDC (Hadoop's MiniKdc, Apache Kerby) in this JVM,
 * service and user principals with their keytabs, the secure-cluster settings for
 * MiniDFSCluster, and what a client outside this JVM needs to reach the cluster: a krb5.conf,
 * a Hadoop client configuration folder, the user's keytab and a delegation token file.
 */
package io.sparktrain.minidfs;

import java.io.DataOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.PrivilegedExceptionAction;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;

final class KerberosSetup {
  /** The quality of protection asked for on RPC and on the data transfer path. */
  static final String[] PROTECTIONS = {"authentication", "integrity", "privacy"};

  // Service principals name "localhost", as Hadoop's own secure tests do: a client builds the
  // NameNode's principal from the host part the server announces, and MIT krb5 (with the
  // settings of the krb5.conf written below) maps hdfs@localhost to hdfs/localhost@REALM.
  private static final String SERVICE_HOST = "localhost";

  private final Path dir;
  private final String protection;
  private final String userName;
  private MiniKdc kdc;
  private Path serviceKeytab;
  private Path userKeytab;
  private Path krb5Conf;
  private Path clientConfDir;
  private Path tokenFile;

  KerberosSetup(Path dir, String protection, String userName) {
    this.dir = dir;
    this.protection = protection;
    this.userName = userName;
  }

  /**
   * Starts the KDC and creates the principals. Must run before anything touches Hadoop's
   * security classes: they read the default realm from the JVM's krb5.conf once, and MiniKdc
   * points the JVM at its own krb5.conf when it starts.
   */
  void startKdc(String loopback) throws Exception {
    Files.createDirectories(dir);
    Properties kdcConf = MiniKdc.createConf();
    kdcConf.setProperty(MiniKdc.KDC_BIND_ADDRESS, loopback);
    kdcConf.setProperty(MiniKdc.KDC_PORT, "0");
    kdc = new MiniKdc(kdcConf, Files.createDirectories(dir.resolve("kdc")).toFile());
    kdc.start();

    serviceKeytab = dir.resolve("hdfs.keytab");
    // One call per keytab: createPrincipal rewrites the keytab file each time.
    kdc.createPrincipal(serviceKeytab.toFile(), "hdfs/" + SERVICE_HOST, "HTTP/" + SERVICE_HOST);
    userKeytab = dir.resolve(userName + ".keytab");
    kdc.createPrincipal(userKeytab.toFile(), userName);
    krb5Conf = writeClientKrb5Conf(loopback);
  }

  String realm() {
    return kdc.getRealm();
  }

  String userPrincipal() {
    return userName + "@" + realm();
  }

  private String servicePrincipal(String service) {
    return service + "/" + SERVICE_HOST + "@" + realm();
  }

  /**
   * The settings of a Kerberized HDFS without root: Kerberos on RPC, block access tokens, and
   * SASL on the data transfer path in place of the privileged ports a secure DataNode would
   * otherwise need (ignore.secure.ports.for.testing lets it run without HTTPS as well).
   */
  void secure(Configuration conf) {
    conf.set("hadoop.security.authentication", "kerberos");
    conf.set("hadoop.security.authorization", "true");
    conf.set("hadoop.rpc.protection", protection);
    conf.set("dfs.block.access.token.enable", "true");
    conf.set("dfs.data.transfer.protection", protection);
    // With privacy, encrypt block data with AES (as production clusters configure) rather
    // than with the SASL DIGEST-MD5 ciphers; hdfs-native negotiates it.
    if ("privacy".equals(protection)) {
      conf.set("dfs.encrypt.data.transfer.cipher.suites", "AES/CTR/NoPadding");
    }
    conf.set("ignore.secure.ports.for.testing", "true");
    String keytab = serviceKeytab.toString();
    conf.set("dfs.namenode.kerberos.principal", servicePrincipal("hdfs"));
    conf.set("dfs.namenode.keytab.file", keytab);
    conf.set("dfs.datanode.kerberos.principal", servicePrincipal("hdfs"));
    conf.set("dfs.datanode.keytab.file", keytab);
    conf.set("dfs.web.authentication.kerberos.principal", servicePrincipal("HTTP"));
    conf.set("dfs.web.authentication.kerberos.keytab", keytab);
    conf.set("dfs.namenode.kerberos.internal.spnego.principal", servicePrincipal("HTTP"));
    // Hadoop's static login state reads this once; the cluster's daemons log in from the
    // service keytab, and this JVM acts as the superuser "hdfs" afterwards.
    UserGroupInformation.setConfiguration(conf);
  }

  /**
   * Once the cluster is up: a home folder owned by the user (the root belongs to the
   * superuser), a world-writable /tmp, the user's delegation token file and the client
   * configuration folder.
   */
  void prepareClient(MiniDFSCluster cluster, Configuration conf, String url) throws Exception {
    FileSystem admin = cluster.getFileSystem();
    org.apache.hadoop.fs.Path home = new org.apache.hadoop.fs.Path("/user/" + userName);
    admin.mkdirs(home);
    admin.setOwner(home, userName, userName);
    org.apache.hadoop.fs.Path tmp = new org.apache.hadoop.fs.Path("/tmp");
    admin.mkdirs(tmp);
    admin.setPermission(tmp, new FsPermission((short) 01777));

    tokenFile = dir.resolve(userName + ".token");
    writeDelegationToken(conf, url);
    clientConfDir = writeClientConf(url);
  }

  /**
   * What YARN gives a container: the user's HDFS delegation token in Hadoop's token storage
   * format, the file HADOOP_TOKEN_FILE_LOCATION names. Obtained as the user, from the user's
   * keytab, so the token's owner is the user.
   */
  private void writeDelegationToken(Configuration conf, String url) throws Exception {
    UserGroupInformation user =
        UserGroupInformation.loginUserFromKeytabAndReturnUGI(userPrincipal(), userKeytab.toString());
    Credentials credentials = user.doAs((PrivilegedExceptionAction<Credentials>) () -> {
      Credentials c = new Credentials();
      try (FileSystem fs = FileSystem.newInstance(URI.create(url), conf)) {
        fs.addDelegationTokens(userName, c);
      }
      return c;
    });
    if (credentials.numberOfTokens() == 0) {
      throw new IOException("the NameNode issued no delegation token for " + userPrincipal());
    }
    try (DataOutputStream out = new DataOutputStream(Files.newOutputStream(tokenFile))) {
      // The same call (and so format) a NodeManager uses for a container's token file.
      credentials.writeTokenStorageToStream(out);
    }
  }

  /**
   * A krb5.conf for clients outside this JVM (MIT krb5: libgssapi_krb5, kinit): the KDC by
   * address, over TCP (the KDC listens on TCP only), and no DNS, so that hdfs@localhost names
   * hdfs/localhost@REALM whatever the resolver says.
   */
  private Path writeClientKrb5Conf(String loopback) throws IOException {
    String realm = realm();
    String text = String.join(
        "\n",
        "[libdefaults]",
        "    default_realm = " + realm,
        "    dns_lookup_realm = false",
        "    dns_lookup_kdc = false",
        "    dns_canonicalize_hostname = false",
        "    rdns = false",
        "    udp_preference_limit = 1",
        "    forwardable = true",
        "",
        "[realms]",
        "    " + realm + " = {",
        "        kdc = " + loopback + ":" + kdc.getPort(),
        "    }",
        "",
        "[domain_realm]",
        "    " + SERVICE_HOST + " = " + realm,
        "    " + loopback + " = " + realm,
        "");
    Path path = dir.resolve("krb5.conf");
    Files.writeString(path, text, StandardCharsets.UTF_8);
    return path;
  }

  /**
   * The client side of the cluster's settings, as on a gateway host: HADOOP_CONF_DIR for
   * hdfs-native (which turns SASL on from hadoop.security.authentication and from
   * dfs.data.transfer.protection) and for Java clients.
   */
  private Path writeClientConf(String url) throws IOException {
    Path conf = Files.createDirectories(dir.resolve("conf"));
    Map<String, String> core = new LinkedHashMap<>();
    core.put("fs.defaultFS", url);
    core.put("hadoop.security.authentication", "kerberos");
    core.put("hadoop.rpc.protection", protection);
    writeSite(conf.resolve("core-site.xml"), core);
    Map<String, String> hdfs = new LinkedHashMap<>();
    hdfs.put("dfs.data.transfer.protection", protection);
    hdfs.put("dfs.namenode.kerberos.principal", servicePrincipal("hdfs"));
    writeSite(conf.resolve("hdfs-site.xml"), hdfs);
    return conf;
  }

  private static void writeSite(Path path, Map<String, String> values) throws IOException {
    Configuration site = new Configuration(false);
    values.forEach(site::set);
    try (OutputStream out = Files.newOutputStream(path)) {
      site.writeXml(out);
    }
  }

  /**
   * The ready line's extra fields, after the URL: space-separated key=value pairs. Values are
   * paths and a principal; the launcher refuses a base dir whose path would break the format.
   */
  String readyFields() {
    Map<String, String> fields = new LinkedHashMap<>();
    fields.put("krb5_conf", krb5Conf.toString());
    fields.put("principal", userPrincipal());
    fields.put("keytab", userKeytab.toString());
    fields.put("conf_dir", clientConfDir.toString());
    fields.put("token_file", tokenFile.toString());
    fields.put("protection", protection);
    StringBuilder line = new StringBuilder();
    fields.forEach((k, v) -> line.append(' ').append(k).append('=').append(v));
    return line.toString();
  }

  void stop() {
    if (kdc != null) {
      kdc.stop();
      kdc = null;
    }
  }

  static boolean isProtection(String value) {
    return Arrays.asList(PROTECTIONS).contains(value);
  }
}
