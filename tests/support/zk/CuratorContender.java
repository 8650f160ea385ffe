// A Curator client that takes Hudi's ZooKeeper lock the way Hudi's ZookeeperBasedLockProvider does: a new
// InterProcessMutex on "<base_path>/<lock_key>" for every acquisition. Test helper for tests/test_lock_zookeeper.py.
//
// Usage: java CuratorContender <connect-string> <session-timeout-ms>
// Commands on stdin, one per line; one answer line each on stdout:
//   acquire <lock-path> <timeout-ms>   -> ACQUIRED <our node path> | TIMEOUT
//   release <lock-path>                -> RELEASED
//   contend <lock-path> <iterations> <hold-ms> <pause-ms> <log-file> <timeout-ms>
//                                      -> DONE <n> | TIMEOUT <n>   (appends "curator enter|exit <unix ns>" lines)
//   quit
// Errors are answered with "ERROR <message>".

import java.io.BufferedReader;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.BoundedExponentialBackoffRetry;

public class CuratorContender {
    private static long wallNanos() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000_000L + now.getNano();
    }

    private static void logLine(FileOutputStream log, String what) throws Exception {
        // One write(2) per line on an O_APPEND descriptor shared in spirit with the Python side.
        log.write(("curator " + what + " " + wallNanos() + "\n").getBytes(StandardCharsets.US_ASCII));
    }

    private static String ourNode(InterProcessMutex mutex) throws Exception {
        List<String> nodes = new ArrayList<>(mutex.getParticipantNodes());
        return nodes.isEmpty() ? "?" : nodes.get(0);
    }

    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.builder()
            .connectString(args[0])
            .retryPolicy(new BoundedExponentialBackoffRetry(100, 1000, 5))
            .sessionTimeoutMs(Integer.parseInt(args[1]))
            .connectionTimeoutMs(10_000)
            .build();
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            System.out.println("ERROR not connected");
            return;
        }
        System.out.println("READY");
        System.out.flush();
        Map<String, InterProcessMutex> held = new HashMap<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            try {
                if (w[0].equals("quit")) {
                    break;
                } else if (w[0].equals("acquire")) {
                    InterProcessMutex mutex = new InterProcessMutex(client, w[1]);
                    if (mutex.acquire(Long.parseLong(w[2]), TimeUnit.MILLISECONDS)) {
                        held.put(w[1], mutex);
                        System.out.println("ACQUIRED " + ourNode(mutex));
                    } else {
                        System.out.println("TIMEOUT");
                    }
                } else if (w[0].equals("release")) {
                    held.remove(w[1]).release();
                    System.out.println("RELEASED");
                } else if (w[0].equals("contend")) {
                    int iterations = Integer.parseInt(w[2]);
                    long holdMs = Long.parseLong(w[3]);
                    long pauseMs = Long.parseLong(w[4]);
                    long timeoutMs = Long.parseLong(w[6]);
                    int done = 0;
                    try (FileOutputStream log = new FileOutputStream(w[5], true)) {
                        for (; done < iterations; done++) {
                            InterProcessMutex mutex = new InterProcessMutex(client, w[1]);
                            if (!mutex.acquire(timeoutMs, TimeUnit.MILLISECONDS)) {
                                break;
                            }
                            try {
                                logLine(log, "enter");
                                Thread.sleep(holdMs);
                                logLine(log, "exit");
                            } finally {
                                mutex.release();
                            }
                            Thread.sleep(ThreadLocalRandom.current().nextLong(pauseMs + 1));
                        }
                    }
                    System.out.println((done == iterations ? "DONE " : "TIMEOUT ") + done);
                } else {
                    System.out.println("ERROR unknown command " + w[0]);
                }
            } catch (Exception e) {
                System.out.println("ERROR " + e);
            }
            System.out.flush();
        }
        client.close();
    }
}
