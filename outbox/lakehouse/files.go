package lakehouse

import (
	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// snapshotFiles returns the paths of the data files a snapshot names, in
// manifest order, with a path named twice listed twice.
func snapshotFiles(fs iceio.IO, snap *table.Snapshot) ([]string, error) {
	if snap == nil {
		return nil, nil
	}
	manifests, err := snap.Manifests(fs)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, m := range manifests {
		if m.ManifestContent() != iceberg.ManifestContentData {
			continue
		}
		for e, err := range m.Entries(fs, true) {
			if err != nil {
				return nil, err
			}
			paths = append(paths, e.DataFile().FilePath())
		}
	}
	return paths, nil
}

// duplicatePath returns a path listed twice, or "".
func duplicatePath(paths []string) string {
	seen := make(map[string]struct{}, len(paths))
	for _, p := range paths {
		if _, ok := seen[p]; ok {
			return p
		}
		seen[p] = struct{}{}
	}
	return ""
}

// setOf returns paths as a set.
func setOf(paths []string) map[string]struct{} {
	s := make(map[string]struct{}, len(paths))
	for _, p := range paths {
		s[p] = struct{}{}
	}
	return s
}

// sameSet says whether two lists hold the same paths, each once.
func sameSet(a []string, b map[string]struct{}) bool {
	if len(a) != len(b) || duplicatePath(a) != "" {
		return false
	}
	for _, p := range a {
		if _, ok := b[p]; !ok {
			return false
		}
	}
	return true
}
