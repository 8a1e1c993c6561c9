"""What the scale intervals take: the kept validation's errors and spreads, and the figures its
check gave (plan/interval.py reads it). Written by tools/scale_validation.py --calibrate: do not
edit by hand."""

import json
from typing import Any

CALIBRATION: dict[str, Any] = json.loads(
    """
{
 "check": {
  "by_class": {
   "gathers": {
    "inside": 69,
    "median_width": 0.7739269173143171,
    "predictions": 70
   },
   "loose": {
    "inside": 34,
    "median_width": 0.6731800674932312,
    "predictions": 35
   },
   "steady": {
    "inside": 183,
    "median_width": 0.20295964126127752,
    "predictions": 190
   }
  },
  "devices": "NVIDIA H100 80GB HBM3, NVIDIA H200",
  "inside": 286,
  "median_width": 0.2778912092477104,
  "method": "each session's intervals from the other sessions' errors and spreads",
  "predictions": 295,
  "sessions": 19,
  "steady": {
   "configurations": 9,
   "count": 78,
   "repeat": 0.025,
   "within_10": 78,
   "within_5": 76
  },
  "unseen_model": {
   "inside": 288,
   "median_width": 0.28807158855055126,
   "models": 7,
   "predictions": 295
  }
 },
 "class_host_cv": {
  "gathers": 0.13282,
  "loose": 0.16715,
  "steady": 0.015865
 },
 "command": [
  "python tools/scale_validation.py --pooled",
  "--published docs/results/2026-11-28-scale-published/published.json",
  "--calibrate llmbench_pytest/plan/scale_calibration.py"
 ],
 "date": "2026-11-29",
 "errors": {
  "anchored": {
   "gathers": [
    0.07364,
    0.01545,
    -0.06884,
    0.07438,
    0.06169,
    0.02892,
    -0.09169,
    0.15058,
    0.04367,
    -0.16972,
    0.20729,
    0.12377,
    0.00366
   ],
   "loose": [
    0.0563,
    0.12562,
    0.07647,
    0.02451,
    0.13168,
    0.11905,
    -0.09221,
    -0.03112,
    -0.33645,
    -0.04586
   ],
   "steady": [
    -0.00096,
    -0.01061,
    -0.00771,
    0.01305,
    0.01096,
    0.00779,
    -0.0182,
    0.0802,
    0.00814,
    -0.00015,
    0.00345,
    5e-05,
    0.00436,
    -0.00783,
    -0.01624,
    -0.00605,
    -0.00973,
    0.00586,
    0.00846,
    0.00077,
    -0.01764,
    -0.00623,
    -0.01177,
    0.01012,
    -0.13414,
    -0.08165,
    -0.06521,
    -0.03448,
    -0.01408,
    -0.05371,
    0.01357,
    0.04012
   ]
  },
  "from_smallest": {
   "gathers": [
    0.04095,
    0.28391,
    -0.00911,
    0.09503,
    -0.03901,
    0.35134,
    0.07359,
    0.16637,
    -0.02155,
    0.18719,
    0.14011,
    0.01291,
    0.05511,
    0.08564,
    0.33689,
    0.04947,
    0.13892,
    0.16606,
    0.06808,
    0.12332,
    0.01089,
    0.10202,
    0.07085,
    0.12731,
    0.13204,
    -0.04464,
    0.32307,
    0.18575,
    -0.02908,
    0.11759,
    0.17828,
    0.05053,
    -0.12076,
    -0.10525,
    -0.07742,
    0.13323,
    -0.04272,
    -0.06208,
    0.10867,
    0.36487,
    0.27226,
    0.06937,
    0.42689,
    -0.06386
   ],
   "loose": [
    -0.18598,
    0.06221,
    -0.04061,
    -0.03027,
    0.1356,
    -0.13236,
    -0.27818,
    -0.24898,
    -0.1436,
    0.14676,
    -0.19579,
    -0.10096,
    -0.1955,
    -0.24435,
    -0.30254,
    0.11856,
    -0.24663,
    0.2464,
    -0.096,
    -0.1293
   ],
   "steady": [
    -0.04653,
    0.0131,
    0.01761,
    -0.00585,
    0.08194,
    0.00705,
    0.00965,
    -0.04876,
    0.02542,
    0.26257,
    -0.04322,
    0.03132,
    -0.10924,
    0.01543,
    0.00573,
    0.01398,
    0.04344,
    -0.00653,
    0.00657,
    -0.03394,
    0.01639,
    -0.0051,
    -0.00209,
    0.00305,
    -0.01342,
    -0.01179,
    -0.10567,
    -0.16351,
    0.01097,
    0.00039,
    0.03973,
    0.00309,
    -0.00536,
    0.00805,
    0.04493,
    -0.05031,
    -0.05317,
    -0.01187,
    0.00841,
    0.00128,
    0.00329,
    -0.01587,
    -0.01976,
    -0.00949,
    0.02344,
    0.01151,
    0.01241,
    0.00163,
    0.10422,
    0.01065,
    0.01553,
    -0.00579,
    0.02308,
    0.00376,
    0.01768,
    0.00997,
    -0.02419,
    -0.03083,
    -0.07522,
    0.02708,
    0.1058,
    0.01598,
    0.00672,
    0.03062,
    0.01412,
    0.00814,
    0.00903,
    -0.02408,
    -0.0104,
    -0.01549,
    -0.0978,
    0.22764,
    0.01209,
    0.00623,
    0.00738,
    0.0239,
    0.0034,
    0.01546,
    0.00844,
    0.03311,
    0.00888,
    0.00279,
    0.00643,
    -0.02107,
    -0.01246,
    0.02664,
    0.01025,
    0.00725,
    0.02816,
    -0.02773,
    -0.02224,
    -0.10287,
    -0.16752,
    -0.17437,
    0.02649,
    0.03745,
    -0.0016,
    -0.04043,
    0.00391,
    0.00519,
    0.01215,
    0.12897,
    0.01296,
    0.00585,
    0.03475,
    -0.08109,
    -0.11227,
    -0.04988,
    -0.10546,
    0.01543,
    0.0096,
    -0.02425,
    -0.00227,
    -0.02801,
    0.10378,
    0.00038,
    -0.03694,
    0.00182,
    0.02061,
    0.03879,
    -0.02648
   ]
  }
 },
 "host_cv": {
  "ddp encdec-50m seq256 b64x1 seq2seq disk | NVIDIA H200": {
   "cv": 0.08749,
   "sessions": 6
  },
  "ddp encdec-50m seq256 b64x1 seq2seq | NVIDIA H200": {
   "cv": 0.21926,
   "sessions": 7
  },
  "ddp llama-1b seq2048 b8x1 | NVIDIA H200": {
   "cv": 0.01197,
   "sessions": 8
  },
  "ddp llama-3b seq512 b8x1 | NVIDIA H200": {
   "cv": 0.00364,
   "sessions": 2
  },
  "ddp mistral-7b seq1024 b4x1 lora dtype=fp16 | NVIDIA H200": {
   "cv": 0.01149,
   "sessions": 3
  },
  "ddp mistral-7b seq1024 b4x1 lora lora_rank=8 | NVIDIA H200": {
   "cv": 0.01041,
   "sessions": 3
  },
  "ddp mistral-7b seq1024 b4x1 lora | NVIDIA H200": {
   "cv": 0.00958,
   "sessions": 7
  },
  "ddp mistral-7b seq512 b4x1 lora | NVIDIA H200": {
   "cv": 0.01168,
   "sessions": 3
  },
  "ddp mistral-7b seq512 b8x1 lora | NVIDIA H200": {
   "cv": 0.00853,
   "sessions": 3
  },
  "fsdp encdec-50m seq256 b64x1 seq2seq disk | NVIDIA H200": {
   "cv": 0.18726,
   "sessions": 6
  },
  "fsdp encdec-50m seq256 b64x1 seq2seq | NVIDIA H200": {
   "cv": 0.16431,
   "sessions": 7
  },
  "fsdp llama-1b seq2048 b8x1 | NVIDIA H200": {
   "cv": 0.01232,
   "sessions": 8
  },
  "fsdp llama-3b seq512 b8x1 | NVIDIA H200": {
   "cv": 0.0037,
   "sessions": 2
  },
  "fsdp mistral-7b seq1024 b4x1 lora | NVIDIA H200": {
   "cv": 0.03398,
   "sessions": 7
  },
  "fsdp_grad_op llama-1b seq2048 b8x1 | NVIDIA H200": {
   "cv": 0.01201,
   "sessions": 8
  },
  "zero0 llama-1b seq2048 b8x1 | NVIDIA H200": {
   "cv": 0.02035,
   "sessions": 8
  },
  "zero1 llama-1b seq2048 b8x1 | NVIDIA H200": {
   "cv": 0.02006,
   "sessions": 8
  },
  "zero2 encdec-50m seq256 b64x1 seq2seq disk | NVIDIA H200": {
   "cv": 0.15167,
   "sessions": 6
  },
  "zero2 encdec-50m seq256 b64x1 seq2seq | NVIDIA H200": {
   "cv": 0.18263,
   "sessions": 7
  },
  "zero2 llama-1b seq2048 b8x1 | NVIDIA H200": {
   "cv": 0.02349,
   "sessions": 8
  },
  "zero2 llama-3b seq512 b8x1 | NVIDIA H200": {
   "cv": 0.00175,
   "sessions": 2
  },
  "zero2 mistral-7b seq1024 b4x1 lora | NVIDIA H200": {
   "cv": 0.01941,
   "sessions": 7
  },
  "zero2_offload llama-1b seq2048 b8x1 | NVIDIA H200": {
   "cv": 0.0613,
   "sessions": 8
  },
  "zero3 llama-1b seq2048 b8x1 | NVIDIA H200": {
   "cv": 0.13282,
   "sessions": 8
  },
  "zero3 llama-3b seq512 b8x1 | NVIDIA H200": {
   "cv": 0.01146,
   "sessions": 2
  },
  "zero3 mistral-7b seq1024 b4x1 lora | NVIDIA H200": {
   "cv": 0.0962,
   "sessions": 7
  },
  "zero3_offload llama-1b seq2048 b8x1 | NVIDIA H200": {
   "cv": 0.11298,
   "sessions": 8
  }
 },
 "host_per_step": 1.1815,
 "published": {
  "inside": 25,
  "median_width_pt": 27.561791355476473,
  "points": 27,
  "within_5pt": 24
 }
}
"""
)
