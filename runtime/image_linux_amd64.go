package runtime

const sysMemfdCreate = 319
