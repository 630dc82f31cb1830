// Command get_weather is an example agrun tool that declares the "network"
// permission: it asks the Open-Meteo API (https://open-meteo.com, no API key)
// for the current weather of a city or of a coordinate.
//
// Arguments: {"city":"Paris"} or {"latitude":48.85,"longitude":2.35}; the
// optional "api_base" (for example "http://127.0.0.1:8080") sends both the
// geocoding and the forecast request to one self-hosted Open-Meteo instance
// (or a test server) instead of the public hosts. Whatever the base, the host
// only lets requests through to the hosts the operator allowed: the public
// API needs allowed_hosts = ["geocoding-api.open-meteo.com",
// "api.open-meteo.com"] (the first only for city names).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	guest "github.com/agcore/agrun/guest-sdk"
	"github.com/agcore/agrun/guest-sdk/guesthttp"
)

// The public Open-Meteo endpoints.
const (
	geocodingBase = "https://geocoding-api.open-meteo.com"
	forecastBase  = "https://api.open-meteo.com"
)

// Args are the tool's arguments.
type Args struct {
	City      string   `json:"city"`
	Latitude  *float64 `json:"latitude"`
	Longitude *float64 `json:"longitude"`
	APIBase   string   `json:"api_base"`
}

// Result is the tool's answer.
type Result struct {
	Location      string  `json:"location"`
	Latitude      float64 `json:"latitude"`
	Longitude     float64 `json:"longitude"`
	TemperatureC  float64 `json:"temperature_c"`
	WindspeedKmh  float64 `json:"windspeed_kmh"`
	WindDirection float64 `json:"wind_direction_deg"`
	WeatherCode   int     `json:"weather_code"`
	Conditions    string  `json:"conditions"`
	Time          string  `json:"time"`
}

func main() {
	guest.Run(weather)
}

func weather(ctx context.Context, in Args) (Result, error) {
	geo, fc := geocodingBase, forecastBase
	if in.APIBase != "" {
		u, err := url.Parse(in.APIBase)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Result{}, fmt.Errorf("api_base %q is not an http(s) URL", in.APIBase)
		}
		geo = strings.TrimSuffix(in.APIBase, "/")
		fc = geo
	}
	client := guesthttp.Client()

	var res Result
	switch {
	case in.Latitude != nil && in.Longitude != nil:
		res.Latitude, res.Longitude = *in.Latitude, *in.Longitude
		res.Location = fmt.Sprintf("%.4f,%.4f", res.Latitude, res.Longitude)
	case in.City != "":
		var g struct {
			Results []struct {
				Name      string  `json:"name"`
				Country   string  `json:"country"`
				Latitude  float64 `json:"latitude"`
				Longitude float64 `json:"longitude"`
			} `json:"results"`
		}
		q := url.Values{"name": {in.City}, "count": {"1"}, "format": {"json"}}
		if err := getJSON(ctx, client, geo+"/v1/search?"+q.Encode(), &g); err != nil {
			return Result{}, fmt.Errorf("geocoding %q: %w", in.City, err)
		}
		if len(g.Results) == 0 {
			return Result{}, fmt.Errorf("city %q not found", in.City)
		}
		r := g.Results[0]
		res.Location, res.Latitude, res.Longitude = r.Name, r.Latitude, r.Longitude
		if r.Country != "" {
			res.Location += ", " + r.Country
		}
	default:
		return Result{}, errors.New(`give "city", or both "latitude" and "longitude"`)
	}

	var f struct {
		Current *struct {
			Time          string  `json:"time"`
			Temperature   float64 `json:"temperature"`
			Windspeed     float64 `json:"windspeed"`
			WindDirection float64 `json:"winddirection"`
			WeatherCode   int     `json:"weathercode"`
		} `json:"current_weather"`
	}
	q := url.Values{
		"latitude":        {fmt.Sprint(res.Latitude)},
		"longitude":       {fmt.Sprint(res.Longitude)},
		"current_weather": {"true"},
	}
	if err := getJSON(ctx, client, fc+"/v1/forecast?"+q.Encode(), &f); err != nil {
		return Result{}, fmt.Errorf("forecast: %w", err)
	}
	if f.Current == nil {
		return Result{}, errors.New("forecast: the answer has no current_weather")
	}
	res.TemperatureC = f.Current.Temperature
	res.WindspeedKmh = f.Current.Windspeed
	res.WindDirection = f.Current.WindDirection
	res.WeatherCode = f.Current.WeatherCode
	res.Conditions = conditions(f.Current.WeatherCode)
	res.Time = f.Current.Time
	guest.Logf(guest.LevelInfo, "weather for %s: %.1f°C", res.Location, res.TemperatureC)
	return res, nil
}

// getJSON fetches u and decodes its JSON body into v.
func getJSON(ctx context.Context, c *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return fmt.Errorf("%s: %s", resp.Status, msg)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decoding the answer: %w", err)
	}
	return nil
}

// conditions names a WMO weather interpretation code.
func conditions(code int) string {
	switch code {
	case 0:
		return "clear sky"
	case 1, 2, 3:
		return [...]string{"mainly clear", "partly cloudy", "overcast"}[code-1]
	case 45, 48:
		return "fog"
	case 51, 53, 55, 56, 57:
		return "drizzle"
	case 61, 63, 65, 66, 67:
		return "rain"
	case 71, 73, 75, 77:
		return "snow"
	case 80, 81, 82:
		return "rain showers"
	case 85, 86:
		return "snow showers"
	case 95, 96, 99:
		return "thunderstorm"
	}
	return "unknown"
}
