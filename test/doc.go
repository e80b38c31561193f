// Package test holds featurefs's end-to-end integration tests. They build
// the featurefs binary, start a real MinIO server on 127.0.0.1 with a
// generated ImageFolder-style bucket (scripts/gen_dataset.py), mount it
// through the kernel (FUSE) with a random-weight ResNet-50 exported from
// torchvision (scripts/export_model.py), and check the mount with ls, stat
// and find, with an unmodified PyTorch DatasetFolder + DataLoader run by
// Debian's /usr/bin/python3 (scripts/loader_check.py), and against
// `featurefs extract` on the same objects.
//
// Every test needs root (kernel mounts), /dev/fuse, the ONNX Runtime library,
// MinIO and Debian's python3-torch: scripts/install-deps.sh installs them,
// and `make test` runs these tests. A missing dependency fails the test with
// a message naming it; nothing skips.
package test
