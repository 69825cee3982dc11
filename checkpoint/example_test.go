package checkpoint_test

import (
	"errors"
	"fmt"
	"log"
	"path/filepath"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

func ExampleOpenFile() {
	f, err := checkpoint.OpenFile(filepath.Join("testdata", "header", "valid-out-of-order.safetensors"))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	for _, t := range f.Tensors {
		fmt.Printf("%s %s %v [%d, %d) %d bytes\n", t.Name, t.DType, t.Shape, t.Begin, t.End, len(f.Data(t)))
	}
	// Output:
	// a F32 [2] [0, 8) 8 bytes
	// b F32 [2] [8, 16) 8 bytes
}

func ExampleParseHeader() {
	h, err := checkpoint.ParseHeader([]byte(`{"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}`), 12)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(h.Metadata["format"], h.Tensors[0].Name, h.Tensors[0].NumElements(), h.DataOffset)

	// Two tensors on one range: the "json attack".
	_, err = checkpoint.ParseHeader([]byte(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`), 4)
	fmt.Println(errors.Is(err, checkpoint.ErrInvalidOffset))
	fmt.Println(err)
	// Output:
	// pt w 6 97
	// true
	// tensor "b": byte 113: invalid safetensors: data offsets do not tile the data section: data_offsets [0, 4] overlap tensor "a", which ends at 4
}

func ExampleOpen() {
	c, err := checkpoint.Open(filepath.Join("testdata", "sharded"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println(c.Architecture(), len(c.Shards), "shards", c.TotalSize(), "bytes", c.Files)
	for _, name := range c.Names() {
		f, t, _ := c.Lookup(name)
		fmt.Println(filepath.Base(f.Path()), name, t.Shape)
	}
	// Output:
	// LlamaForCausalLM 2 shards 52 bytes [config.json]
	// model-00002-of-00002.safetensors lm_head.weight [4 2]
	// model-00001-of-00002.safetensors model.embed_tokens.weight [4 2]
	// model-00001-of-00002.safetensors model.layers.0.mlp.up_proj.weight [2 4]
	// model-00002-of-00002.safetensors model.norm.weight [2]
}

func ExampleParseIndex() {
	idx, err := checkpoint.ParseIndex([]byte(`{"metadata":{"total_size":16},"weight_map":{"w":"model-00001-of-00001.safetensors"}}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(idx.Metadata["total_size"], idx.WeightMap["w"])

	_, err = checkpoint.ParseIndex([]byte(`{"weight_map":{"w":"../../etc/model.safetensors"}}`))
	fmt.Println(errors.Is(err, checkpoint.ErrIndex))
	// Output:
	// 16 model-00001-of-00001.safetensors
	// true
}
