//go:build !race

package skulktest_test

// raceBuild says this test binary was built with -race.
const raceBuild = false
