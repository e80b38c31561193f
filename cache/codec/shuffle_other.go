//go:build !amd64 || purego

package codec

const useAsm = false

func shuffleAsm(dst, src []byte, es, n int) int   { return 0 }
func unshuffleAsm(dst, src []byte, es, n int) int { return 0 }
