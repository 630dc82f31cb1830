package s3store

// SetPageSize sets how many keys one ListObjectsV2 page asks for, so
// that a test can make List read several pages.
func SetPageSize(s *Objects, n int32) { s.pageSize = n }
