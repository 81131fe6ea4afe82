"""``python -m tvm_fusion_ext.cli`` is the ``tvm-fusion`` console script."""

from . import main

raise SystemExit(main())
