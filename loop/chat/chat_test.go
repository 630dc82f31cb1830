package chat_test

import (
	"testing"

	"github.com/agcore/agrun/internal/testing/providertest"
)

func TestSuite(t *testing.T) { providertest.Run(t, providertest.Chat) }
