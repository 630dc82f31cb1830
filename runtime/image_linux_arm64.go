package runtime

const sysMemfdCreate = 279
