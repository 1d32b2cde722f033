"""The glue of the toolchain: check → translate → compile → verify → bench, and the CLI commands for it."""
