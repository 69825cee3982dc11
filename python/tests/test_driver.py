"""The ctypes driver's CPU-side facts: its structures have cuda.h's layout
(the sizes and offsets tools/abi/cuabi.c checks against the header), a
tensor map's slot is 64-byte aligned, and a launch falls back only for the
refusal its fallback removes (kernels/decode.go's refused)."""

import ctypes
import types
import unittest

from sfsurgery import driver


class LayoutTest(unittest.TestCase):
    def test_launch_config(self):
        c = driver._Config
        self.assertEqual(ctypes.sizeof(c), 56)
        self.assertEqual(c.shared.offset, 24)
        self.assertEqual(c.stream.offset, 32)
        self.assertEqual(c.attrs.offset, 40)
        self.assertEqual(c.nattrs.offset, 48)

    def test_launch_attribute(self):
        self.assertEqual(ctypes.sizeof(driver._Attr), 72)
        self.assertEqual(driver._Attr.val.offset, 8)

    def test_map_slot(self):
        for _ in range(8):
            s = driver._MapSlot()
            base = ctypes.addressof(s._buf)
            self.assertEqual(s.address % 64, 0)
            self.assertLessEqual(s.address + 128, base + ctypes.sizeof(s._buf))


class RefusedTest(unittest.TestCase):
    def test_table(self):
        coop = types.SimpleNamespace(cooperative=True, cluster=(0, 0, 0))
        clus = types.SimpleNamespace(cooperative=False, cluster=(2, 1, 1))
        plain = types.SimpleNamespace(cooperative=False, cluster=(0, 0, 0))
        cases = [
            (coop, driver._CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, True),
            (coop, driver._CUDA_ERROR_INVALID_CLUSTER_SIZE, False),
            (clus, driver._CUDA_ERROR_INVALID_CLUSTER_SIZE, True),
            (clus, driver._CUDA_ERROR_NOT_SUPPORTED, True),
            (clus, driver._CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, False),
            (plain, driver._CUDA_ERROR_NOT_SUPPORTED, False),
            (coop, 0, False),
        ]
        for rec, code, want in cases:
            with self.subTest(rec=rec, code=code):
                self.assertEqual(driver._refused(rec, code), want)


if __name__ == "__main__":
    unittest.main()
