"""The build's stages, one module each: a ``STAGE`` declaration and its ``node()`` (plain functions over Arrow tables)."""
