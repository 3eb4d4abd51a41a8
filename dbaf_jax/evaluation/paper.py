"""The DBAF paper's own results (its Tables I-IV, rows "Ours" / "Full"), for the report to sit beside ours.

Table I and II are measured on 200 CelebA-HQ test images, recognition with FaceNet
(CASIA-WebFace and VGGFace2 weights) and ArcFace at tau 1.1 and 0.8. Table III is
face detection on anonymized images with MTCNN and Dlib (Dlib is not part of this
project). Table IV is the ablation: anonymization and recovery of four configurations.
"""

# Table I: recognition rate, by recogniser.
RECOGNITION = {
    "anonymization": {"facenet_casia_webface": 0.012, "facenet_vggface2": 0.02, "arcface": 0.0},
    "recovery": {"facenet_casia_webface": 1.0, "facenet_vggface2": 1.0, "arcface": 1.0},
}

# Table II: image quality against the originals.
QUALITY = {
    "anonymization": {"mse": 0.013, "psnr": 24.978, "lpips": 0.016, "fid": 9.61},
    "recovery": {"mse": 0.004, "psnr": 29.535, "lpips": 0.027, "fid": 7.917},
}

# Table III: utility for face detectors.
UTILITY = {
    "mtcnn": {"detection_rate": 1.0, "box_distance": 4.972, "landmark_distance": 2.540},
    "dlib": {"detection_rate": 1.0, "box_distance": 3.905, "landmark_distance": 2.238},
}

# Table IV: ablation, by configuration; "de_identification" and "recovery_rate" are
# recognition rates (the values equal Table I's FaceNet VGGFace2 column for "full").
ABLATION_CONFIGURATIONS = ("single_stage", "without_cid", "without_maar", "full")
ABLATION = {
    "anonymization": {
        "mse": (0.033, 0.015, 0.129, 0.013),
        "lpips": (0.024, 0.02, 0.096, 0.016),
        "psnr": (21.658, 24.515, 15.139, 24.978),
        "fid": (16.375, 11.07, 39.411, 9.61),
        "de_identification": (0.031, 0.035, 0.035, 0.02),
    },
    "recovery": {
        "mse": (0.014, 0.005, 0.117, 0.004),
        "lpips": (0.032, 0.03, 0.09, 0.027),
        "psnr": (25.785, 28.542, 15.574, 29.535),
        "fid": (9.919, 8.238, 35.534, 7.917),
        "recovery_rate": (1.0, 0.99, 0.965, 1.0),
    },
}
# The recogniser whose rates Table IV reports.
ABLATION_RECOGNISER = "facenet_vggface2"
