"""examples/python/counter.py runs: two copies at once add up exactly, and a
stale fence makes it exit 1."""

import os
import subprocess
import sys
import unittest

from tests.support import Resp, need_broker

COUNTER = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "python",
                       "counter.py")


class CounterExampleTests(unittest.TestCase):
    def setUp(self):
        need_broker()
        if not os.path.exists(COUNTER):
            self.skipTest("examples/python/counter.py is not beside this checkout")
        self.redis = Resp()
        self.addCleanup(self.redis.close)
        self.redis.command("DEL", "counter:value", "fence:last")

    def run_counter(self, n):
        env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(__file__), ".."))
        return subprocess.Popen([sys.executable, COUNTER, "--iterations", str(n)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def test_two_copies_add_up(self):
        procs = [self.run_counter(15) for _ in range(2)]
        for p in procs:
            out, err = p.communicate(timeout=30)
            self.assertEqual(p.returncode, 0, err.decode())
        self.assertEqual(self.redis.command("GET", "counter:value"), b"30")

    def test_stale_fence_exits_1(self):
        self.redis.command("SET", "fence:last", str(2**62))
        p = self.run_counter(1)
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"fence violation", err)


if __name__ == "__main__":
    unittest.main()
