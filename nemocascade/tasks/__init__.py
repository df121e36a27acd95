"""The built-in synthetic task world: math, code, instruction following and chat."""
