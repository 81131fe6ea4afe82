"""The application layer: what the command line (:mod:`tvm_fusion_ext.cli`) and ``scripts/`` run."""
