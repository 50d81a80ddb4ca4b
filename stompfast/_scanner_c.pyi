# The compiled scanner has the pure twin's API exactly (tests/test_implementation.py holds
# them to it): its types are the twin's.
from ._scanner_py import FrameScanner as FrameScanner, encode_frame as encode_frame
