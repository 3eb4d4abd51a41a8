"""Face detectors behind one seam: `base` (the `Detector` protocol and `Detections`),
`registry` (the detectors by name, the default, building one), `centerface`
(CenterFace, the default: decoding and suppression in JAX, parity with the published
network and decoding), `mtcnn` and `mtcnn_steps` (MTCNN, parity with facenet-pytorch),
`dlib_detectors` (dlib's HOG and CNN detectors), `ensemble` (several detectors' faces
merged) and `tiling` (any detector on photos larger than it takes at once)."""
