// SerializableHadoopConf: a Hadoop Configuration that can be broadcast to read tasks.
package io.sparktrain.spark;

import java.io.IOException;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.io.Serializable;
import org.apache.hadoop.conf.Configuration;

/**
 * Carries a {@link Configuration} (not {@code Serializable}, but {@code Writable}) to executors,
 * as Spark's own file formats broadcast theirs; kept here so the jar needs no Spark-internal class.
 */
final class SerializableHadoopConf implements Serializable {
  private static final long serialVersionUID = 1L;

  private transient Configuration conf;

  SerializableHadoopConf(Configuration conf) {
    this.conf = conf;
  }

  Configuration get() {
    return conf;
  }

  private void writeObject(ObjectOutputStream out) throws IOException {
    out.defaultWriteObject();
    conf.write(out);
  }

  private void readObject(ObjectInputStream in) throws IOException, ClassNotFoundException {
    in.defaultReadObject();
    conf = new Configuration(false);
    conf.readFields(in);
  }
}
