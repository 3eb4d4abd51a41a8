"""Face detectors behind one seam: `base` (the `Detector` protocol and `Detections`),
`registry` (the detectors by name, the default, building one), `mtcnn` and
`mtcnn_steps` (MTCNN, parity with facenet-pytorch), `dlib_detectors` (dlib's HOG and
CNN detectors) and `ensemble` (several detectors' faces merged)."""
