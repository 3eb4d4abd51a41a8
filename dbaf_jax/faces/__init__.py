"""Faces in photos: detection (MTCNN)."""
