package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/agcore/agrun/mcp"
)

// parsePromptArgs reads --prompt's KEY=VALUE arguments from pos.
func (o *runOptions) parsePromptArgs(fs *flag.FlagSet, pos []string) error {
	if _, _, ok := strings.Cut(o.promptRef, ":"); !ok {
		return usageOf(fs, "--prompt %q: want SERVER:NAME", safe(o.promptRef))
	}
	o.promptArgs = map[string]string{}
	for _, a := range pos {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return usageOf(fs, "with --prompt, the arguments are the prompt's KEY=VALUE arguments; %q is not one", safe(a))
		}
		o.promptArgs[k] = v
	}
	return nil
}

// mcpPrompt is the run's prompt with --prompt and --resource applied:
// the server prompt's messages (each assistant message marked so) in
// place of the prompt, then each resource's text, under a line naming it.
// What servers send is cleaned by package mcp and bounded
// (mcp.MaxResourceTextBytes each).
func (c *cli) mcpPrompt(ctx context.Context, fs *flag.FlagSet, e *env, o *runOptions, prompt string) (string, error) {
	if o.promptRef == "" && len(o.resources) == 0 {
		return prompt, nil
	}
	client := func(ref, flag string) (*mcp.Client, string, error) {
		server, rest, ok := strings.Cut(ref, ":")
		if !ok || server == "" || rest == "" {
			return nil, "", usageOf(fs, "%s %q: want SERVER:%s", flag, safe(ref), map[string]string{"--prompt": "NAME", "--resource": "URI"}[flag])
		}
		for _, cl := range e.Clients() {
			if cl.Name() == server {
				return cl, rest, nil
			}
		}
		if err := e.BrokenFor(server + "__x"); err != nil {
			return nil, "", fmt.Errorf("%s: the MCP server %s did not load: %s", flag, safe(server), safe(e.explain(server, err)))
		}
		return nil, "", usageOf(fs, "%s: no MCP server %q loaded ([mcp.%s] in the config, and not left out by --tools or --no-tools)", flag, safe(server), safe(server))
	}
	var parts []string
	if o.promptRef != "" {
		cl, name, err := client(o.promptRef, "--prompt")
		if err != nil {
			return "", err
		}
		msgs, err := cl.GetPrompt(ctx, name, o.promptArgs)
		if err != nil {
			return "", fmt.Errorf("--prompt %s: %w", safe(o.promptRef), err)
		}
		for _, m := range msgs {
			if m.Role == "assistant" {
				parts = append(parts, "(the prompt's assistant message) "+m.Text)
				continue
			}
			parts = append(parts, m.Text)
		}
	} else {
		parts = append(parts, prompt)
	}
	for _, ref := range o.resources {
		cl, uri, err := client(ref, "--resource")
		if err != nil {
			return "", err
		}
		text, err := cl.ReadResource(ctx, uri)
		if err != nil {
			return "", fmt.Errorf("--resource %s: %w", safe(ref), err)
		}
		parts = append(parts, fmt.Sprintf("[resource %s]\n%s", ref, text))
	}
	return strings.Join(parts, "\n\n"), nil
}
