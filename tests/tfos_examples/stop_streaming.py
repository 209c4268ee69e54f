"""TFoS's examples/utils/stop_streaming.py as a TFoS user runs it, with ``tensorflowonspark``
changed to ``sparktrain.tfos``: ``python stop_streaming.py <host> <port>`` asks the
reservation server of a streaming job (its address is in the driver's log) to stop, and
``TFCluster.shutdown(ssc)`` then stops the StreamingContext gracefully."""

import sys

from sparktrain.tfos import reservation

if __name__ == "__main__":
    host = sys.argv[1]
    port = int(sys.argv[2])
    addr = (host, port)
    client = reservation.Client(addr)
    client.request_stop()
    client.close()
