// Package arrowread has no code of its own: its test reads the Parquet
// files package trace writes with Apache Arrow's reader, a second and
// independent implementation, column by column. It lives apart from
// trace's own tests so that trace's test and fuzz builds do not compile
// arrow-go and gRPC.
package arrowread
