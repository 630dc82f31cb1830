(module (func))
