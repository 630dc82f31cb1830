package cluster

// SetS3PageSize sets how many keys one ListObjectsV2 page asks for, so
// that a test can make List read several pages.
func SetS3PageSize(s *S3Objects, n int32) { s.pageSize = n }
